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
    /// `WHERE`-fragment selecting rows after the marker (bound as `$marker_param`), for `table`
    /// aliased as `t`. NULLs sort last ascending and first descending, as Postgres does by
    /// default.
    pub fn after_marker_sql(&self, table: &str, marker_param: usize) -> Option<String> {
        self.marker_id?;
        Some(self.after_sql(table, &format!("${marker_param}")))
    }

    /// `WHERE`-fragment selecting rows after the row whose id `marker` (SQL: a parameter, or a
    /// subquery finding the marker) is; none when it is NULL.
    pub fn after_sql(&self, table: &str, marker: &str) -> String {
        let k = self.sort_key;
        if k == "id" {
            // The primary key (never NULL, unique): one range an index walks from the marker
            // (the general form below is an `OR` no index can start from: every row before
            // the marker is read and filtered).
            let op = if self.desc { '<' } else { '>' };
            return format!("t.id {op} {marker}");
        }
        let m = format!("(SELECT {k} FROM {table} WHERE id = {marker})");
        if self.desc {
            format!(
                "((t.{k} < {m}) OR (t.{k} IS NOT DISTINCT FROM {m} AND t.id < {marker}) OR ({m} IS NULL AND t.{k} IS NOT NULL))"
            )
        } else {
            format!(
                "((t.{k} > {m}) OR (t.{k} IS NOT DISTINCT FROM {m} AND t.id > {marker}) OR ({m} IS NOT NULL AND t.{k} IS NULL))"
            )
        }
    }

    /// Appends what follows the `WHERE` condition of `table t`'s rows: those after `after` (a
    /// fragment of [`Self::after_sql`]; none: from the first), in the page's order, the limit.
    /// The limit is in the text, not a parameter: the prepared statement's generic plan would
    /// not know it and, with many rows, sort them all instead of walking an index for one page.
    pub fn push_after(&self, sql: &mut String, after: Option<&str>) {
        if let Some(after) = after {
            sql.push_str(" AND ");
            sql.push_str(after);
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
