//! List parameters shared by every collection: limit, sort key/direction, marker, `next` links.

use uuid::Uuid;

use super::error::ApiResult;
use super::extract::QueryArgs;
use crate::db::page::PageQuery;
use crate::domain::error::DomainError;

/// Validated list parameters, before the marker is resolved to a row.
#[derive(Debug, Clone)]
pub struct ListParams {
    pub limit: i64,
    pub sort_key: &'static str,
    pub desc: bool,
    pub marker: Option<Uuid>,
}

impl ListParams {
    /// Reads `limit`, `sort_key`, `sort_dir` and a UUID `marker`.
    pub fn parse(args: &QueryArgs, sort_keys: &[&'static str], max_limit: i64) -> ApiResult<Self> {
        let (limit, sort_key, desc) = common(args, sort_keys, max_limit)?;
        Ok(Self {
            limit,
            sort_key,
            desc,
            marker: args.uuid("marker")?,
        })
    }

    pub fn page(&self, marker_id: Option<i64>) -> PageQuery {
        PageQuery {
            sort_key: self.sort_key,
            desc: self.desc,
            marker_id,
            limit: self.limit,
        }
    }

    pub fn dir(&self) -> &'static str {
        if self.desc { "desc" } else { "asc" }
    }

    /// `{base}/v1/{path}?sort_key=..&sort_dir=..&limit=..&marker=..`
    pub fn next_url(&self, base: &str, path: &str, marker: &str) -> String {
        format!(
            "{base}/v1/{path}?sort_key={}&sort_dir={}&limit={}&marker={marker}",
            self.sort_key,
            self.dir(),
            self.limit
        )
    }
}

/// limit/sort_key/sort_dir with Magnum's messages.
pub fn common(
    args: &QueryArgs,
    sort_keys: &[&'static str],
    max_limit: i64,
) -> ApiResult<(i64, &'static str, bool)> {
    let limit = match args.int("limit")? {
        None => max_limit,
        Some(l) if l <= 0 => {
            return Err(DomainError::BadRequest("Limit must be positive".into()).into());
        }
        Some(l) => l.min(max_limit),
    };
    let sort_dir = args.get("sort_dir").unwrap_or("asc");
    let desc = match sort_dir {
        "asc" => false,
        "desc" => true,
        other => {
            return Err(DomainError::BadRequest(format!(
                "Invalid sort direction: {other}. Acceptable values are 'asc' or 'desc'"
            ))
            .into());
        }
    };
    let requested = args.get("sort_key").unwrap_or("id");
    let sort_key = sort_keys
        .iter()
        .copied()
        .find(|k| *k == requested)
        .ok_or_else(|| {
            DomainError::BadRequest(format!(
                "The sort_key value \"{requested}\" is an invalid field for sorting"
            ))
        })?;
    Ok((limit, sort_key, desc))
}
