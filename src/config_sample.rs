//! The configuration reference: `magnum-capi config sample`, committed as
//! `etc/magnum-capi.toml.example`, generated from the schema of the typed configuration
//! (`config.rs`: every section, key, default and doc comment), so it cannot drift from the code.

use schemars::Schema;
use serde_json::{Map, Value};

use crate::config::Config;

/// Columns the comments are wrapped to.
const WIDTH: usize = 100;

/// The command that writes the committed reference (said in its header and by the test that
/// fails when it is stale).
pub const REGENERATE: &str = "cargo run -q -- config sample > etc/magnum-capi.toml.example";

const HEADER: &str = "\
magnum-capi configuration reference, generated from the typed configuration (src/config.rs) by
`magnum-capi config sample`; do not edit by hand: regenerate it with
`cargo run -q -- config sample > etc/magnum-capi.toml.example`.

One TOML file, given with `--config FILE` or MAGNUM_CAPI_CONFIG. Every key is optional: the values
shown are the defaults, and a key shown commented out is unset by default (its value there is an
example). Any key can also be set in the environment as MAGNUM_CAPI__<SECTION>__<KEY>, e.g.
MAGNUM_CAPI__DATABASE__URL (lists comma-separated). Unknown keys are an error. `magnum-capi check
--config FILE` checks a configuration and everything it names. Guide: docs/install.md.";

/// The whole reference, as TOML with every key documented.
pub fn sample() -> String {
    let schema = schemars::schema_for!(Config);
    let root = schema.as_value();
    let defs = root.get("$defs").and_then(Value::as_object);
    let mut out = String::new();
    comment(&mut out, "", HEADER);
    for (section, field) in properties(root) {
        let body = resolve(field, defs);
        out.push('\n');
        let doc = join_docs(&[&doc_of(body), &doc_of(field)]);
        comment(&mut out, "", &doc);
        out.push_str(&format!("[{section}]\n"));
        let mut tables = Vec::new();
        for (key, field) in properties(body) {
            match table_items(field, defs) {
                Some(items) => tables.push((key, field, items)),
                None => {
                    out.push('\n');
                    entry(&mut out, "", key, field, defs);
                }
            }
        }
        for (key, field, items) in tables {
            out.push('\n');
            let doc = join_docs(&[
                &doc_of(field),
                &doc_of(items),
                "None by default; one table each:",
            ]);
            comment(&mut out, "", &doc);
            out.push_str(&format!("# [[{section}.{key}]]\n"));
            for (sub, field) in properties(items) {
                entry(&mut out, "# ", sub, field, defs);
            }
        }
    }
    out
}

/// One key: its documentation, then `key = default`, or commented out with an example when it is
/// unset by default.
fn entry(
    out: &mut String,
    prefix: &str,
    key: &str,
    field: &Value,
    defs: Option<&Map<String, Value>>,
) {
    let resolved = resolve(field, defs);
    let choices = choices(resolved);
    let doc = join_docs(&[&doc_of(field), &choices]);
    comment(out, prefix, &doc);
    let default = field.get("default").filter(|v| !v.is_null());
    match (default, example(field)) {
        (Some(value), _) => out.push_str(&format!(
            "{prefix}{} = {}\n",
            toml_key(key),
            toml_value(value)
        )),
        (None, Some(value)) => {
            out.push_str(&format!("# {} = {}\n", toml_key(key), toml_value(value)))
        }
        // A list whose items have no serialised form (secrets, addresses): empty by default.
        (None, None) if is_type(field, "array") => {
            out.push_str(&format!("{prefix}{} = []\n", toml_key(key)));
        }
        (None, None) => out.push_str(&format!("# {} =\n", toml_key(key))),
    }
}

/// The first example of a key (`#[schemars(example = …)]`).
pub fn example(field: &Value) -> Option<&Value> {
    field.get("examples")?.as_array()?.first()
}

/// An object's properties, in the order of the struct's fields.
fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v))
}

/// The definition a `$ref` (directly, or as the one non-null branch of an `Option`) points to;
/// the schema itself otherwise.
fn resolve<'a>(schema: &'a Value, defs: Option<&'a Map<String, Value>>) -> &'a Value {
    let reference = schema.get("$ref").or_else(|| {
        schema
            .get("anyOf")
            .and_then(Value::as_array)?
            .iter()
            .find_map(|s| s.get("$ref"))
    });
    reference
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs?.get(name))
        .unwrap_or(schema)
}

/// The item schema of a list of tables (`[[capi.management_clusters]]`).
fn table_items<'a>(field: &'a Value, defs: Option<&'a Map<String, Value>>) -> Option<&'a Value> {
    let items = resolve(field.get("items")?, defs);
    items.get("properties").is_some().then_some(items)
}

fn is_type(schema: &Value, name: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == name,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == name),
        _ => false,
    }
}

/// `One of: "a" (what it does), "b" (…).` for an enumeration.
fn choices(schema: &Value) -> String {
    let Some(variants) = schema
        .get("oneOf")
        .or_else(|| schema.get("enum"))
        .and_then(Value::as_array)
    else {
        return String::new();
    };
    let named: Vec<String> = variants
        .iter()
        .map(|v| {
            let value = v
                .get("const")
                .or_else(|| v.get("enum")?.get(0))
                .unwrap_or(v);
            let doc = doc_of(v);
            let value = toml_value(value);
            if doc.is_empty() {
                value
            } else {
                format!("{value}: {}", doc.trim_end_matches('.'))
            }
        })
        .collect();
    format!("One of: {}.", named.join("; "))
}

/// A schema's doc comment: schemars splits it into a `title` (its first paragraph, when more
/// follow) and a `description`; both, as one text.
fn doc_of(schema: &Value) -> String {
    let part = |key: &str| schema.get(key).and_then(Value::as_str).unwrap_or("");
    join_docs(&[part("title"), part("description")])
}

fn join_docs(parts: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// `text` as `# ` comment lines wrapped at [`WIDTH`], paragraphs kept.
fn comment(out: &mut String, prefix: &str, text: &str) {
    let lead = format!("{prefix}# ");
    for (i, paragraph) in text.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str(lead.trim_end());
            out.push('\n');
        }
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && lead.len() + line.len() + 1 + word.len() > WIDTH {
                out.push_str(&format!("{lead}{line}\n"));
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            out.push_str(&format!("{lead}{line}\n"));
        }
    }
}

fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON value as an inline TOML value.
fn toml_value(value: &Value) -> String {
    match value {
        Value::Null => "\"\"".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => toml_string(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) if map.is_empty() => "{}".into(),
        Value::Object(map) => format!(
            "{{ {} }}",
            map.iter()
                .map(|(k, v)| format!("{} = {}", toml_key(k), toml_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The schema the reference is generated from (for tests that check it, e.g. that every key
/// unset by default carries an example).
pub fn schema() -> Schema {
    schemars::schema_for!(Config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_unset_by_default_has_an_example() {
        let schema = schema();
        let root = schema.as_value();
        let defs = root.get("$defs").and_then(Value::as_object);
        let mut missing = Vec::new();
        for (section, field) in properties(root) {
            let body = resolve(field, defs);
            for (key, field) in properties(body) {
                let fields: Vec<(String, &Value)> = match table_items(field, defs) {
                    Some(items) => properties(items)
                        .map(|(k, f)| (format!("{section}.{key}.{k}"), f))
                        .collect(),
                    None => vec![(format!("{section}.{key}"), field)],
                };
                for (name, field) in fields {
                    let unset = field.get("default").is_none_or(Value::is_null);
                    if unset && example(field).is_none() && !is_type(field, "array") {
                        missing.push(name);
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "give these keys an example (#[schemars(example = …)]): {missing:?}"
        );
    }

    #[test]
    fn comments_wrap_at_the_width_and_keep_paragraphs() {
        let mut out = String::new();
        comment(&mut out, "", &format!("{}\n\nsecond", "word ".repeat(40)));
        assert!(out.lines().all(|l| l.len() <= WIDTH), "{out}");
        assert!(out.contains("\n#\n# second\n"), "{out}");
    }

    #[test]
    fn values_are_written_as_toml() {
        let v = serde_json::json!({"1.30": "a\"b", "k": [1, true]});
        assert_eq!(toml_value(&v), r#"{ "1.30" = "a\"b", k = [1, true] }"#);
    }
}
