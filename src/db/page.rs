//! Keyset pagination shared by every list: validated sort key and direction, a marker row, a limit.
//!
//! SQL built here (and wrapped in `AssertSqlSafe` by the repositories) only ever interpolates
//! column names from the per-table `SORT_KEYS` allow-lists and fixed fragments; values are bound.

/// A validated page request. `sort_key` is a column name from the table's allow-list.
#[derive(Debug, Clone)]
pub struct PageQuery {
    pub sort_key: &'static str,
    pub desc: bool,
    /// Primary key of the marker row; results start strictly after it.
    pub marker_id: Option<i64>,
    pub limit: i64,
}

impl PageQuery {
    /// `WHERE`-fragment selecting rows after the marker, for `table` aliased as `t`.
    /// NULLs sort last ascending and first descending, as Postgres does by default.
    pub fn after_marker_sql(&self, table: &str, marker_param: usize) -> Option<String> {
        self.marker_id?;
        let k = self.sort_key;
        let m = format!("(SELECT {k} FROM {table} WHERE id = ${marker_param})");
        let p = format!("${marker_param}");
        Some(if self.desc {
            format!(
                "((t.{k} < {m}) OR (t.{k} IS NOT DISTINCT FROM {m} AND t.id < {p}) OR ({m} IS NULL AND t.{k} IS NOT NULL))"
            )
        } else {
            format!(
                "((t.{k} > {m}) OR (t.{k} IS NOT DISTINCT FROM {m} AND t.id > {p}) OR ({m} IS NOT NULL AND t.{k} IS NULL))"
            )
        })
    }

    /// Appends what follows the `WHERE` condition of `table t`'s rows: after the marker
    /// (`$marker_param`), in the page's order, the limit. The limit is in the text, not a
    /// parameter: the prepared statement's generic plan would not know it and, with many rows,
    /// sort them all instead of walking an index for one page.
    pub fn push_rest_sql(&self, sql: &mut String, table: &str, marker_param: usize) {
        if let Some(after) = self.after_marker_sql(table, marker_param) {
            sql.push_str(" AND ");
            sql.push_str(&after);
        }
        sql.push(' ');
        sql.push_str(&self.order_sql());
        sql.push_str(&format!(" LIMIT {}", self.limit));
    }

    pub fn order_sql(&self) -> String {
        let k = self.sort_key;
        if self.desc {
            format!("ORDER BY t.{k} DESC NULLS FIRST, t.id DESC")
        } else {
            format!("ORDER BY t.{k} ASC NULLS LAST, t.id ASC")
        }
    }
}
