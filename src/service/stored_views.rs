//! Each cluster's and each template's view stored beside it in PostgreSQL (`db::cluster_views`,
//! `db::template_views`), so a page or a show built from PostgreSQL is a concatenation of stored
//! bytes, not a build of every row.
//!
//! A template's view is the same for every caller and microversion but for its links: it is
//! stored for no base URL with the offsets of its links.
//!
//! What is stored is the full view ([`views::cluster_aggregated`]) as serde writes it, for no
//! base URL, the 1.13 key and no caller, with the offsets of what a request changes: the links
//! (the request's base URL), the `stack_id`/`cluster_id` key (below or from 1.13), the end of the
//! short form's fields (the short form is the full one's first fields), the `faults` member (on
//! shows only), and the end (an admin's `management_cluster`). The rest is the same for every
//! caller, so the answers are byte for byte those built from the rows.

use std::collections::HashMap;
use std::ops::Range;

use uuid::Uuid;

use super::views;
use super::{Error, Result};
use crate::app::App;
use crate::db::DbResult;
use crate::db::cluster_views::{self as cvdb, ViewHead};
use crate::db::clusters::{self as cdb, ClusterWithNodes};
use crate::db::template_views::{self as tvdb, TemplateHead};
use crate::db::templates::TemplateRow;
use crate::domain::version::Version;

/// Which form of a cluster an answer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `GET /v1/clusters`.
    Short,
    /// `GET /v1/clusters/detail` (no `faults`).
    Detail,
    /// `GET /v1/clusters/{ident}`.
    Show,
}

/// How one request asks for views.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub form: Form,
    pub base: &'a str,
    pub mv: Version,
    pub admin: bool,
}

/// The stored form of a cluster's view: its JSON after the offsets ([`with_offsets`]) of its
/// links (value), the stack key (quotes included), the end of the short form and `faults` (its
/// comma included; empty when absent).
pub fn build(row: ClusterWithNodes) -> Result<Vec<u8>> {
    let view = views::cluster_aggregated(row, false, "", Version::new(1, 13));
    let json = serde_json::to_vec(&view)?;
    let broken = || Error::Invariant("a cluster view without its members");
    let members = members(&json).ok_or_else(broken)?;
    let find = |key: &[u8]| members.iter().find(|m| &json[m.key.clone()] == key);
    let links = find(b"\"links\"").ok_or_else(broken)?.value.clone();
    let stack = find(b"\"cluster_id\"").ok_or_else(broken)?.key.clone();
    let short_end = find(b"\"merge_labels\"").ok_or_else(broken)?.value.end;
    let end = json.len() - 1;
    // The comma before the member goes with it.
    let faults = find(b"\"faults\"").map_or(end..end, |m| m.key.start - 1..m.value.end);
    with_offsets(
        [
            links.start,
            links.end,
            stack.start,
            stack.end,
            short_end,
            faults.start,
            faults.end,
        ],
        &json,
    )
}

/// `json` after its offsets, each a little-endian `u32`.
fn with_offsets<const N: usize>(at: [usize; N], json: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(N * 4 + json.len());
    for at in at {
        let at = u32::try_from(at).map_err(|_| Error::Invariant("a stored view over 4 GiB"))?;
        out.extend_from_slice(&at.to_le_bytes());
    }
    out.extend_from_slice(json);
    Ok(out)
}

/// The offsets [`with_offsets`] wrote before the JSON, checked in order and within it, and the
/// JSON (its last byte excluded from the offsets' range: the closing brace).
fn offsets<const N: usize>(stored: &[u8]) -> Result<([usize; N], &[u8])> {
    let broken = || Error::Invariant("a stored view that is not one");
    let (head, json) = stored.split_at_checked(N * 4).ok_or_else(broken)?;
    let mut at = [0usize; N];
    for (i, chunk) in head.chunks_exact(4).enumerate() {
        let n = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        at[i] = usize::try_from(n).map_err(|_| broken())?;
    }
    let end = json.len().checked_sub(1).ok_or_else(broken)?;
    if !at.is_sorted() || at.last().is_some_and(|&last| last > end) {
        return Err(broken());
    }
    Ok((at, json))
}

/// A request's links, written without building them: `[{self}, {bookmark}]` as serde writes
/// [`views::links`] (the base URL escaped once per request, as serde escapes it).
pub struct Links(String);

impl Links {
    pub fn new(base: &str) -> Result<Self> {
        let quoted = serde_json::to_string(base)?;
        let escaped = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .ok_or(Error::Invariant("a JSON string without its quotes"))?;
        Ok(Self(escaped.to_owned()))
    }

    /// The links of `collection/uuid` (`collection` needs no escaping).
    fn write(&self, out: &mut Vec<u8>, collection: &str, uuid: Uuid) {
        let mut id = Uuid::encode_buffer();
        let id = uuid.hyphenated().encode_lower(&mut id).as_bytes();
        for (version, rel) in [("/v1/", "self"), ("/", "bookmark")] {
            out.extend_from_slice(if rel == "self" {
                b"[{\"href\":\""
            } else {
                b",{\"href\":\""
            });
            out.extend_from_slice(self.0.as_bytes());
            out.extend_from_slice(version.as_bytes());
            out.extend_from_slice(collection.as_bytes());
            out.push(b'/');
            out.extend_from_slice(id);
            out.extend_from_slice(b"\",\"rel\":\"");
            out.extend_from_slice(rel.as_bytes());
            out.extend_from_slice(b"\"}");
        }
        out.push(b']');
    }
}

/// Writes the view of cluster `uuid` stored as `stored` (from [`build`]) as `ask` asks for it
/// (`links`: its base URL); `management_cluster` is the cluster's (shown to admins).
fn write(
    out: &mut Vec<u8>,
    stored: &[u8],
    uuid: Uuid,
    management_cluster: Option<&str>,
    ask: Ask,
    links: &Links,
) -> Result<()> {
    let (at, json) = offsets::<7>(stored)?;
    let [
        links_start,
        links_end,
        key_start,
        key_end,
        short_end,
        faults_start,
        faults_end,
    ] = at;
    let end = json.len() - 1;
    out.extend_from_slice(&json[..links_start]);
    links.write(out, "clusters", uuid);
    out.extend_from_slice(&json[links_end..key_start]);
    out.extend_from_slice(if ask.mv.at_least(13) {
        b"\"cluster_id\""
    } else {
        b"\"stack_id\""
    });
    if ask.form == Form::Short {
        out.extend_from_slice(&json[key_end..short_end]);
    } else {
        out.extend_from_slice(&json[key_end..faults_start]);
        if ask.form == Form::Show {
            out.extend_from_slice(&json[faults_start..faults_end]);
        }
        out.extend_from_slice(&json[faults_end..end]);
        if let (true, Some(m)) = (ask.admin, management_cluster) {
            out.extend_from_slice(b",\"management_cluster\":");
            serde_json::to_writer(&mut *out, m)?;
        }
    }
    out.push(b'}');
    Ok(())
}

/// Writes the views of `heads` (a page or a show) in their order, separated by commas, as `ask`
/// asks ([`write_heads`]); returns how many were written.
pub async fn write_all(
    app: &App,
    out: &mut Vec<u8>,
    heads: Vec<ViewHead>,
    ask: Ask<'_>,
) -> Result<usize> {
    let links = Links::new(ask.base)?;
    write_heads::<Clusters>(app, out, &heads, |out, head, stored, built| {
        // A view built now shows the placement read with its rows.
        let placed = built.map_or(head.management_cluster.as_deref(), Option::as_deref);
        write(out, stored, head.uuid, placed, ask, &links)
    })
    .await
}

/// A kind of stored view: how a page's views that are not stored are built from their rows
/// and stored for the next reads.
trait Kind {
    /// A view's head on a page.
    type Head;
    /// What a view built from its rows brings besides its stored form.
    type Extra;
    /// The kind's name in a log line.
    const WHAT: &'static str;
    /// The head's uuid and its stored view (`None`: not built yet, or retired).
    fn head(head: &Self::Head) -> (Uuid, Option<&[u8]>);
    /// The views of `uuids` (those still there) built from their rows read in one statement.
    async fn build_from_rows(app: &App, uuids: &[Uuid]) -> Result<Vec<Built<Self::Extra>>>;
    /// Stores views built from rows read at their versions.
    async fn store(app: &App, built: &[(Uuid, i64, Vec<u8>)]) -> DbResult<()>;
}

/// A view built from its rows: its uuid, what else it brings, the version of its stored view
/// the rows were read at (`None`: no view row, nothing to store under), its stored form.
type Built<X> = (Uuid, X, Option<i64>, Vec<u8>);

/// Clusters' views (`db::cluster_views`); one built now brings its cluster's management
/// cluster, which the stored form leaves out.
struct Clusters;

impl Kind for Clusters {
    type Head = ViewHead;
    type Extra = Option<String>;
    const WHAT: &'static str = "cluster";

    fn head(head: &ViewHead) -> (Uuid, Option<&[u8]>) {
        (head.uuid, head.body.as_deref())
    }

    async fn build_from_rows(app: &App, uuids: &[Uuid]) -> Result<Vec<Built<Option<String>>>> {
        cdb::with_nodes_by_uuids(&app.reads, uuids)
            .await?
            .into_iter()
            .map(|mut row| {
                // Not part of the stored view (an admin's, written per request).
                let placed = row.cluster.management_cluster.take();
                Ok((row.cluster.uuid, placed, row.view_version, build(row)?))
            })
            .collect()
    }

    async fn store(app: &App, built: &[(Uuid, i64, Vec<u8>)]) -> DbResult<()> {
        cvdb::store(&app.pool, built).await
    }
}

/// Templates' views (`db::template_views`).
struct Templates;

impl Kind for Templates {
    type Head = TemplateHead;
    type Extra = ();
    const WHAT: &'static str = "template";

    fn head(head: &TemplateHead) -> (Uuid, Option<&[u8]>) {
        (head.uuid, head.body.as_deref())
    }

    async fn build_from_rows(app: &App, uuids: &[Uuid]) -> Result<Vec<Built<()>>> {
        tvdb::by_uuids(&app.reads, uuids)
            .await?
            .into_iter()
            .map(|t| Ok((t.row.uuid, (), t.view_version, build_template(t.row)?)))
            .collect()
    }

    async fn store(app: &App, built: &[(Uuid, i64, Vec<u8>)]) -> DbResult<()> {
        tvdb::store(&app.pool, built).await
    }
}

/// Writes the views of `heads` in their order, separated by commas, each by `write_one` (with
/// its stored form, and what a view built now brings): the stored ones as they are, the others
/// built from their rows in one statement and stored for the next reads. A head whose row is
/// gone since it was read is left out; returns how many were written.
async fn write_heads<K: Kind>(
    app: &App,
    out: &mut Vec<u8>,
    heads: &[K::Head],
    mut write_one: impl FnMut(&mut Vec<u8>, &K::Head, &[u8], Option<&K::Extra>) -> Result<()>,
) -> Result<usize> {
    let missing: Vec<Uuid> = heads
        .iter()
        .map(K::head)
        .filter_map(|(uuid, body)| body.is_none().then_some(uuid))
        .collect();
    let mut built = HashMap::new();
    if !missing.is_empty() {
        for (uuid, extra, version, body) in K::build_from_rows(app, &missing).await? {
            built.insert(uuid, (extra, version, body));
        }
    }
    let mut written = 0;
    for head in heads {
        let (uuid, body) = K::head(head);
        let (stored, extra) = match (body, built.get(&uuid)) {
            (Some(body), _) => (body, None),
            (None, Some((extra, _, body))) => (body.as_slice(), Some(extra)),
            (None, None) => continue,
        };
        if written > 0 {
            out.push(b',');
        }
        write_one(out, head, stored, extra)?;
        written += 1;
    }
    let store: Vec<_> = built
        .into_iter()
        .filter_map(|(uuid, (_, version, body))| Some((uuid, version?, body)))
        .collect();
    if !store.is_empty() {
        // Only a cache of what was just built from the rows: a failure costs the next read a
        // build, not this answer.
        if let Err(e) = K::store(app, &store).await {
            tracing::warn!(error = %e, "storing {} views failed", K::WHAT);
        }
    }
    Ok(written)
}

/// The stored form of a template's view: [`views::template_owned`] for no base URL, after the
/// offsets of its links.
pub fn build_template(row: TemplateRow) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(&views::template_owned(row, ""))?;
    let broken = || Error::Invariant("a template view without its links");
    let links = members(&json)
        .ok_or_else(broken)?
        .into_iter()
        .find(|m| &json[m.key.clone()] == b"\"links\"")
        .ok_or_else(broken)?
        .value;
    with_offsets([links.start, links.end], &json)
}

/// Writes the views of the templates `heads` in their order, separated by commas, with
/// `links` ([`write_heads`]).
pub async fn write_templates(
    app: &App,
    out: &mut Vec<u8>,
    heads: Vec<TemplateHead>,
    links: &Links,
) -> Result<()> {
    write_heads::<Templates>(app, out, &heads, |out, head, stored, _| {
        let ([links_start, links_end], json) = offsets::<2>(stored)?;
        out.extend_from_slice(&json[..links_start]);
        links.write(out, "clustertemplates", head.uuid);
        out.extend_from_slice(&json[links_end..]);
        Ok(())
    })
    .await?;
    Ok(())
}

/// A member of a JSON object: its key (quotes included) and its value.
struct Member {
    key: Range<usize>,
    value: Range<usize>,
}

/// The members of the compact JSON object `json` (as serde_json writes it: no whitespace).
/// Hand-rolled: JSON parsers give values, not where they are.
fn members(json: &[u8]) -> Option<Vec<Member>> {
    if json.first() != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        match json.get(i)? {
            b'}' => return Some(out),
            b',' => i += 1,
            _ => {}
        }
        let key = i..string_end(json, i)?;
        i = key.end;
        if json.get(i)? != &b':' {
            return None;
        }
        let start = i + 1;
        i = value_end(json, start)?;
        out.push(Member {
            key,
            value: start..i,
        });
    }
}

/// The end of the string starting at `i` (after its closing quote).
fn string_end(json: &[u8], i: usize) -> Option<usize> {
    if json.get(i)? != &b'"' {
        return None;
    }
    let mut j = i + 1;
    loop {
        match json.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The end of the value starting at `i`.
fn value_end(json: &[u8], i: usize) -> Option<usize> {
    match json.get(i)? {
        b'"' => string_end(json, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match json.get(j)? {
                    b'"' => {
                        j = string_end(json, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(json.get(j)?, b',' | b'}' | b']') {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_written_as_serde_writes_them_whatever_the_base_holds() {
        let uuid = Uuid::new_v4();
        for base in ["", "http://127.0.0.1:9511", "https://h\"x\\y\u{1}\n☃/</"] {
            for collection in ["clusters", "clustertemplates"] {
                let mut got = Vec::new();
                Links::new(base).unwrap().write(&mut got, collection, uuid);
                let want = serde_json::to_vec(&views::links(base, &format!("{collection}/{uuid}")))
                    .unwrap();
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    String::from_utf8(want).unwrap()
                );
            }
        }
    }

    #[test]
    fn members_are_found_whatever_their_strings_hold() {
        let json = br#"{"a":"x\"}],\\","links":[{"href":"/v1/c","rel":"self"}],"n":-1.5e3,"o":{"links":[1,{"}":"]"}]},"z":null}"#;
        let m = members(json).unwrap();
        let keys: Vec<&[u8]> = m.iter().map(|m| &json[m.key.clone()]).collect();
        assert_eq!(
            keys,
            [&b"\"a\""[..], b"\"links\"", b"\"n\"", b"\"o\"", b"\"z\""]
        );
        assert_eq!(&json[m[2].value.clone()], b"-1.5e3");
        assert_eq!(&json[m[3].value.clone()], br#"{"links":[1,{"}":"]"}]}"#);
        assert_eq!(&json[m[4].value.clone()], b"null");
        assert!(members(b"{\"a\":").is_none());
        assert!(members(b"[]").is_none());
    }
}
