//! Reads a Magnum database (MySQL/MariaDB, sqlx's MySQL driver) of any release from 2023.1 on:
//! which of the columns `domain::imported` wants each table has is asked from
//! `information_schema` (not inferred from the alembic version), and each table is read in one
//! statement, in Magnum's id order, as plain text/integer values.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Row};

use crate::domain::imported::{
    CLUSTER_COLUMNS, Column, Kind, NODEGROUP_COLUMNS, QUOTA_COLUMNS, RawRow, TEMPLATE_COLUMNS,
    Tables,
};

/// What reading a Magnum database can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "--magnum-db is not a MySQL/MariaDB URL (mysql://user:password@host[:port]/database): {0}"
    )]
    Url(String),
    #[error("cannot connect to the Magnum database at {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("the database {database} is not a Magnum database: {why}")]
    NotMagnum { database: String, why: String },
    #[error("reading table {table} of the Magnum database: {source}")]
    Query {
        table: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

/// The counts of the tables the import does not carry over (`federation`, …), by name.
pub type Skipped = Vec<(&'static str, i64)>;

/// Connects to `url` (at most `timeout` to answer), never logging the password.
pub async fn connect(url: &str, timeout: Duration) -> Result<MySqlConnection, ReadError> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "mysql" | "mariadb") => {}
        Ok(u) => return Err(ReadError::Url(format!("the scheme is {}", u.scheme()))),
        Err(e) => return Err(ReadError::Url(e.to_string())),
    }
    let opts: MySqlConnectOptions = url.parse().map_err(|e| ReadError::Url(format!("{e}")))?;
    let target = shown(url);
    let opts = opts.disable_statement_logging();
    match tokio::time::timeout(timeout, opts.connect()).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(source)) => Err(ReadError::Connect { target, source }),
        Err(_) => Err(ReadError::Connect {
            target,
            source: sqlx::Error::PoolTimedOut,
        }),
    }
}

/// `url` without its password, for messages.
pub fn shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "the given URL".into(),
    }
}

/// Every table the import reads, and the row counts of those it skips.
pub async fn read(conn: &mut MySqlConnection) -> Result<(Tables, Skipped), ReadError> {
    let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut *conn)
        .await
        .map_err(|source| ReadError::Query {
            table: "information_schema",
            source,
        })?;
    let database = database.ok_or_else(|| ReadError::NotMagnum {
        database: "(none)".into(),
        why: "the URL names no database".into(),
    })?;
    let tables = Tables {
        templates: table(conn, &database, "cluster_template", TEMPLATE_COLUMNS).await?,
        clusters: table(conn, &database, "cluster", CLUSTER_COLUMNS).await?,
        nodegroups: table(conn, &database, "nodegroup", NODEGROUP_COLUMNS).await?,
        quotas: table(conn, &database, "quotas", QUOTA_COLUMNS).await?,
    };
    let mut skipped = Vec::new();
    for (name, _) in crate::domain::imported::SKIPPED_TABLES {
        if !columns_of(conn, &database, name).await?.is_empty() {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM `{name}`"
            )))
            .fetch_one(&mut *conn)
            .await
            .map_err(|source| ReadError::Query {
                table: name,
                source,
            })?;
            skipped.push((*name, n));
        }
    }
    Ok((tables, skipped))
}

async fn columns_of(
    conn: &mut MySqlConnection,
    database: &str,
    table: &'static str,
) -> Result<BTreeSet<String>, ReadError> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(column_name AS CHAR) FROM information_schema.columns
          WHERE table_schema = ? AND table_name = ?",
    )
    .bind(database)
    .bind(table)
    .fetch_all(&mut *conn)
    .await
    .map_err(|source| ReadError::Query { table, source })?;
    Ok(names.into_iter().collect())
}

/// The select expression of `c`: text as is, integers and booleans as signed integers,
/// timestamps as `YYYY-MM-DD HH:MM:SS[.ffffff]` text.
fn expression(c: &Column) -> String {
    let n = c.name;
    match c.kind {
        Kind::Text => format!("`{n}`"),
        Kind::Int => format!("CAST(`{n}` AS SIGNED) AS `{n}`"),
        Kind::Time => format!("CAST(`{n}` AS CHAR) AS `{n}`"),
    }
}

async fn table(
    conn: &mut MySqlConnection,
    database: &str,
    table: &'static str,
    wanted: &[Column],
) -> Result<Vec<RawRow>, ReadError> {
    let have = columns_of(conn, database, table).await?;
    if have.is_empty() {
        return Err(ReadError::NotMagnum {
            database: database.into(),
            why: format!("it has no table {table}"),
        });
    }
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|c| c.required && !have.contains(c.name))
        .map(|c| c.name)
        .collect();
    if !missing.is_empty() {
        return Err(ReadError::NotMagnum {
            database: database.into(),
            why: format!(
                "table {table} has no column {} (a Magnum release older than 2023.1?)",
                missing.join(", ")
            ),
        });
    }
    let present: Vec<&Column> = wanted.iter().filter(|c| have.contains(c.name)).collect();
    let select = present
        .iter()
        .map(|c| expression(c))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {select} FROM `{table}` ORDER BY `id`"
    )))
    .fetch_all(&mut *conn)
    .await
    .map_err(|source| ReadError::Query { table, source })?;
    let query_err = |source| ReadError::Query { table, source };
    rows.iter()
        .map(|row| {
            let mut m = Map::new();
            for c in &present {
                let v = match c.kind {
                    Kind::Int => row
                        .try_get::<Option<i64>, _>(c.name)
                        .map_err(query_err)?
                        .map_or(Value::Null, Value::from),
                    Kind::Text | Kind::Time => row
                        .try_get::<Option<String>, _>(c.name)
                        .map_err(query_err)?
                        .map_or(Value::Null, Value::String),
                };
                m.insert(c.name.to_string(), v);
            }
            Ok(m)
        })
        .collect()
}
