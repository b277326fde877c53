//! List parameters shared by every collection: limit, sort key/direction and marker from the
//! query string, with Magnum's messages.

use super::error::ApiResult;
use super::extract::QueryArgs;
use crate::domain::error::DomainError;
use crate::domain::listing::ListQuery;

/// Reads `limit`, `sort_key`, `sort_dir` and a UUID `marker` for a collection sorted by one of
/// `sort_keys`.
pub fn list_query(
    args: &QueryArgs,
    sort_keys: &[&'static str],
    max_limit: i64,
) -> ApiResult<ListQuery> {
    let (limit, sort_key, desc) = common(args, sort_keys, max_limit)?;
    Ok(ListQuery {
        limit,
        sort_key,
        desc,
        marker: args.uuid("marker")?,
    })
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
