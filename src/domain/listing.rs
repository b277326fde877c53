//! A validated list request (page size, sort, marker) and the `next` link of a full page.

use uuid::Uuid;

/// What a collection request asks for, validated against the collection's sort keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: i64,
    pub sort_key: &'static str,
    pub desc: bool,
    /// The uuid of the last item of the previous page.
    pub marker: Option<Uuid>,
}

impl ListQuery {
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

    /// The `next` link when `len` items filled the page.
    pub fn next_if_full(
        &self,
        len: usize,
        next: impl FnOnce() -> Option<String>,
    ) -> Option<String> {
        if i64::try_from(len).is_ok_and(|l| l == self.limit) {
            next()
        } else {
            None
        }
    }
}
