//! The layering rules of the crate, checked on the source: dependencies point one way
//! (api → service → domain / db / driver backends; the driver works on domain values and
//! imports no db), one writer of `cluster.status` (requests, the worker and the status writer
//! move it through it), and every module says what it owns.

use std::path::{Path, PathBuf};

fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir),
        &mut out,
    );
    assert!(!out.is_empty(), "no sources under src/{dir}");
    out
}

/// The lines of `text` outside its `#[cfg(test)]` module that mention `needle` as a path.
fn uses(text: &str, needle: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| {
            l.match_indices(needle).any(|(i, _)| {
                let rest = &l[i + needle.len()..];
                rest.starts_with("::") || rest.starts_with(';') || rest.starts_with(" as")
            })
        })
        .map(str::to_string)
        .collect()
}

fn assert_no_import(layer: &str, forbidden: &[&str]) {
    let mut found = Vec::new();
    for (path, text) in sources(layer) {
        for f in forbidden {
            for line in uses(&text, f) {
                found.push(format!("{}: {}", path.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "src/{layer} must not import {forbidden:?}:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_driver_never_reaches_up_into_the_service_or_the_worker() {
    assert_no_import("capi", &["crate::service", "crate::worker", "crate::api"]);
    assert_no_import("driver", &["crate::service", "crate::worker", "crate::api"]);
}

#[test]
fn http_reaches_the_driver_only_through_services() {
    assert_no_import("api", &["crate::capi", "crate::driver::simulated"]);
}

#[test]
fn services_know_no_http() {
    assert_no_import("service", &["crate::api", "crate::capi", "axum"]);
}

#[test]
fn the_domain_is_pure() {
    assert_no_import(
        "domain",
        &[
            "crate::api",
            "crate::service",
            "crate::db",
            "crate::capi",
            "crate::driver",
            "crate::openstack",
            "sqlx",
            "kube",
        ],
    );
}

#[test]
fn persistence_knows_no_upper_layer() {
    assert_no_import(
        "db",
        &[
            "crate::api",
            "crate::service",
            "crate::capi",
            "crate::driver",
        ],
    );
}

/// Every SQL statement of src/ (its string literals outside the test modules) and of the
/// migrations (their functions and triggers) that writes `cluster.status` or
/// `cluster.status_reason` — an `UPDATE` of `cluster` however spelt (any case, spacing, line
/// breaks, alias, schema, a table name filled in at run time) setting either, or an upsert
/// into `cluster` that does — is in `db/status.rs`, which owns the transitions.
#[test]
fn only_the_status_writer_writes_cluster_statuses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut writers: Vec<String> = sources("")
        .into_iter()
        .filter(|(_, text)| {
            let code = text.split("#[cfg(test)]").next().unwrap_or(text);
            string_literals(code)
                .iter()
                .any(|sql| writes_cluster_status(sql))
        })
        .map(|(path, _)| {
            path.strip_prefix(root.join("src"))
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    for entry in std::fs::read_dir(root.join("migrations")).unwrap() {
        let path = entry.unwrap().path();
        if writes_cluster_status(&std::fs::read_to_string(&path).unwrap()) {
            writers.push(path.display().to_string());
        }
    }
    assert_eq!(writers, ["db/status.rs"], "cluster.status writers");
}

/// The contents of the string literals (`"…"`, `r#"…"#`) of Rust source `text`.
fn string_literals(text: &str) -> Vec<String> {
    lex(text, true)
        .into_iter()
        .filter_map(|t| match t.tok {
            Tok::Str(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// Whether SQL text `sql` writes `cluster.status` or `cluster.status_reason` (see
/// [`only_the_status_writer_writes_cluster_statuses`]). A table filled in at run time
/// (`{table}`, `%I`) counts as `cluster`: a writer cannot hide behind a placeholder.
fn writes_cluster_status(sql: &str) -> bool {
    // Lower case, SQL comments dropped, Rust line continuations joined, one space between words.
    let sql: String = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .map(|l| l.trim_end().trim_end_matches('\\'))
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let words: Vec<&str> = sql.split_whitespace().collect();
    let sql = words.join(" ");
    let is_cluster = |t: &str| {
        let t = t.trim_matches('"');
        let t = t.rsplit('.').next().unwrap_or(t).trim_matches('"');
        t == "cluster" || t.starts_with('{') || t.starts_with('%') || t.starts_with('$')
    };
    // The assignments of a SET list starting at `rest`, up to the clause that ends it.
    let sets_status = |rest: &str| {
        let end = [" where ", " from ", " returning ", ";", " on conflict"]
            .iter()
            .filter_map(|k| rest.find(k))
            .min()
            .unwrap_or(rest.len());
        let list = format!(" {}", &rest[..end]);
        ["status", "status_reason"].iter().any(|col| {
            list.match_indices(col).any(|(i, _)| {
                let before = list[..i].chars().next_back().unwrap_or(' ');
                let after = list[i + col.len()..]
                    .trim_start()
                    .chars()
                    .next()
                    .unwrap_or(' ');
                matches!(before, ' ' | ',' | '(' | '.') && matches!(after, '=' | ',' | ')')
            })
        })
    };
    let mut i = 0;
    while let Some(at) = sql[i..].find("update ").map(|a| a + i) {
        i = at + 1;
        let starts_word =
            at == 0 || !sql[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if !starts_word {
            continue;
        }
        let mut rest = sql[at + "update ".len()..].split(' ');
        let mut table = rest.next().unwrap_or("");
        if table == "only" {
            table = rest.next().unwrap_or("");
        }
        // `DO UPDATE SET` of an upsert: its table is the INSERT's.
        let upsert = sql[..at].trim_end().ends_with(" do");
        let set_at = if upsert {
            let insert = sql[..at]
                .rfind("insert into ")
                .map(|k| k + "insert into ".len());
            let into = insert.map(|k| sql[k..].split([' ', '(']).next().unwrap_or(""));
            if !into.is_some_and(is_cluster) {
                continue;
            }
            at + "update ".len()
        } else {
            if !is_cluster(table) {
                continue;
            }
            // The alias, if any, then SET.
            match sql[at..].find(" set ") {
                Some(k) if sql[at..at + k].split(' ').count() <= 4 => at + k,
                _ => continue,
            }
        };
        let rest = &sql[set_at..];
        if let Some(list) = rest
            .strip_prefix(" set ")
            .or_else(|| rest.strip_prefix("set "))
            && sets_status(list)
        {
            return true;
        }
    }
    false
}

/// The detector of status writes on the forms a writer could take.
#[test]
fn the_status_write_finder_reads_every_spelling() {
    for writer in [
        "UPDATE cluster SET status = $2, status_reason = $3 WHERE uuid = $1",
        "update cluster\n   set updated_at = now(),\n       status = $1 where id = 1",
        "UPDATE public.cluster AS c SET status_reason = NULL FROM x WHERE c.id = x.id",
        "UPDATE cluster c SET (status, status_reason) = ($1, $2)",
        "UPDATE ONLY \"cluster\" SET status='CREATE_FAILED'",
        "UPDATE {table} SET status = $1 WHERE uuid = $2",
        "INSERT INTO cluster (uuid, status) VALUES ($1, $2)
         ON CONFLICT (uuid) DO UPDATE SET status = excluded.status",
        "BEGIN\n  -- a trigger\n  UPDATE cluster SET status = NEW.state WHERE uuid = NEW.cluster_uuid;\nEND",
    ] {
        assert!(writes_cluster_status(writer), "not found: {writer}");
    }
    for other in [
        "UPDATE nodegroup SET status = $2 WHERE uuid = $1",
        "UPDATE cluster SET health_status = $2, health_status_reason = $3 WHERE uuid = $1",
        "UPDATE cluster SET api_address = $2 WHERE status = 'CREATE_COMPLETE'",
        "SELECT status FROM cluster WHERE uuid = $1",
        "INSERT INTO cluster (uuid, status) VALUES ($1, $2)",
        "INSERT INTO cluster_view (cluster_uuid) VALUES ($1)
         ON CONFLICT (cluster_uuid) DO UPDATE SET status = 1",
        "UPDATE operation SET state = 'done' WHERE id = $1",
    ] {
        assert!(!writes_cluster_status(other), "not a writer: {other}");
    }
    let literals = string_literals(
        "let a = \"UPDATE cluster SET status = 1\"; // \"not this\"\n\
         let b = r#\"raw \"quoted\" text\"#; let c = 'x'; fn f<'a>() {}",
    );
    assert_eq!(
        literals,
        ["UPDATE cluster SET status = 1", "raw \"quoted\" text"]
    );
}

#[test]
fn every_module_says_what_it_owns() {
    let missing: Vec<String> = sources("")
        .into_iter()
        .filter(|(_, text)| {
            let first = text.lines().find(|l| !l.starts_with("#![")).unwrap_or("");
            !first.starts_with("//!")
        })
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a `//!` line: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The import graph between the files of src/ (what a circle is made of).

/// A token of Rust source, with comments and character literals already dropped (string
/// literals too, unless asked for: [`lex`]).
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// The contents of a string literal (`"…"` or a raw `r#"…"#`), escapes left as written.
    Str(String),
    /// `::`
    Sep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The tokens of `text` that can make a path: identifiers, `::` and punctuation; comments,
/// string/byte/raw-string and character literals, lifetimes and numbers are skipped.
fn tokenize(text: &str) -> Vec<Token> {
    lex(text, false)
}

/// [`tokenize`], with the string literals as [`Tok::Str`] when `strings`.
fn lex(text: &str, strings: bool) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    // Skips a quoted literal opened at `i` (the quote), honouring backslash escapes.
    let skip_quoted = |mut i: usize, quote: char, line: &mut usize| -> usize {
        i += 1;
        while i < c.len() && c[i] != quote {
            if c[i] == '\n' {
                *line += 1;
            }
            i += if c[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            let start = i;
            i = skip_quoted(i, '"', &mut line);
            if strings {
                out.push(Token {
                    tok: Tok::Str(c[start + 1..(i - 1).min(c.len())].iter().collect()),
                    line,
                });
            }
        } else if ch == '\'' {
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                i = skip_quoted(i, '\'', &mut line);
            } else {
                // A lifetime or label: `'a`.
                i += 1;
                while is_ident(at(i)) {
                    i += 1;
                }
            }
        } else if is_ident_start(ch) {
            // Literal prefixes: b"…", b'…', r"…", r#"…"#, br#"…"#, c"…"; raw identifiers r#x.
            let mut j = i;
            while is_ident(at(j)) {
                j += 1;
            }
            let word: String = c[i..j].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && (at(j) == '"' || (at(j) == '#' && !is_ident_start(at(j + 1)))) {
                let mut hashes = 0;
                while at(j) == '#' {
                    hashes += 1;
                    j += 1;
                }
                j += 1; // the opening quote
                let start = j;
                loop {
                    if j >= c.len() {
                        break;
                    }
                    if c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                        if strings && word == "r" {
                            out.push(Token {
                                tok: Tok::Str(c[start..j].iter().collect()),
                                line,
                            });
                        }
                        j += 1 + hashes;
                        break;
                    }
                    if c[j] == '\n' {
                        line += 1;
                    }
                    j += 1;
                }
                i = j;
            } else if matches!(word.as_str(), "b" | "c") && at(j) == '"' {
                i = skip_quoted(j, '"', &mut line);
            } else if word == "b" && at(j) == '\'' {
                i = skip_quoted(j, '\'', &mut line);
            } else if word == "r" && at(j) == '#' {
                let mut k = j + 1;
                while is_ident(at(k)) {
                    k += 1;
                }
                out.push(Token {
                    tok: Tok::Ident(c[j + 1..k].iter().collect()),
                    line,
                });
                i = k;
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
                i = j;
            }
        } else if ch.is_ascii_digit() {
            while is_ident(at(i)) {
                i += 1;
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// One import of a file: the path as written, the module it names from the crate root, the line.
#[derive(Debug, Clone)]
struct Import {
    written: String,
    module: Vec<String>,
    line: usize,
}

/// The module path of a file under src/: `a/b.rs` and `a/b/mod.rs` are `a::b`; lib.rs and
/// main.rs are the root.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn punct(t: Option<&Token>, p: char) -> bool {
    t.is_some_and(|t| t.tok == Tok::Punct(p))
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t.map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn sep(t: Option<&Token>) -> bool {
    t.is_some_and(|t| t.tok == Tok::Sep)
}

/// Index past the item starting at `i` (what a `#[cfg(test)]` switches off): up to its `;` or
/// the end of its first top-level `{ … }` block.
fn skip_item(t: &[Token], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < t.len() {
        match t[i].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Expands the use tree at `i` (after `use`) into its paths; `i` ends past the tree.
fn use_tree(t: &[Token], i: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, usize)>) {
    let mut path = prefix;
    let line = t.get(*i).map_or(0, |t| t.line);
    loop {
        if let Some(s) = ident(t.get(*i)) {
            path.push(s.to_string());
            *i += 1;
            if sep(t.get(*i)) {
                *i += 1;
                continue;
            }
            if ident(t.get(*i)) == Some("as") {
                *i += 2;
            }
        } else if punct(t.get(*i), '{') {
            *i += 1;
            while *i < t.len() && !punct(t.get(*i), '}') {
                use_tree(t, i, path.clone(), out);
                if punct(t.get(*i), ',') {
                    *i += 1;
                }
            }
            *i += 1;
            return;
        } else if punct(t.get(*i), '*') {
            *i += 1;
        } else if sep(t.get(*i)) {
            // `use ::std::…`
            *i += 1;
            continue;
        }
        break;
    }
    out.push((path, line));
}

/// The paths of crate items `text` names outside `#[cfg(test)]` items (use trees expanded; the
/// module each path is written in, for `super`/`self`).
fn written_paths(text: &str, module: &[String]) -> Vec<(Vec<String>, Vec<String>, usize)> {
    let t = tokenize(text);
    let mut out = Vec::new();
    // Inline modules (`mod kinds { … }`) open at a brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let here = || -> Vec<String> {
            let mut m = module.to_vec();
            m.extend(inline.iter().map(|(n, _)| n.clone()));
            m
        };
        match &t[i].tok {
            Tok::Punct('#') if punct(t.get(i + 1), '[') => {
                let end = {
                    let mut j = i + 1;
                    let mut d = 0;
                    loop {
                        match t.get(j).map(|t| &t.tok) {
                            Some(Tok::Punct('[')) => d += 1,
                            Some(Tok::Punct(']')) => {
                                d -= 1;
                                if d == 0 {
                                    break j + 1;
                                }
                            }
                            None => break j,
                            _ => {}
                        }
                        j += 1;
                    }
                };
                let words: Vec<&str> = t[i + 2..end - 1]
                    .iter()
                    .map(|t| match &t.tok {
                        Tok::Ident(s) => s.as_str(),
                        Tok::Punct('(') => "(",
                        Tok::Punct(')') => ")",
                        _ => "?",
                    })
                    .collect();
                i = if words == ["cfg", "(", "test", ")"] {
                    skip_item(&t, end)
                } else {
                    end
                };
                continue;
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(name), true) = (ident(t.get(i + 1)), punct(t.get(i + 2), '{')) {
                    inline.push((name.to_string(), depth + 1));
                }
                // `mod x;` declares a child: not an import.
                i += 2;
                continue;
            }
            Tok::Ident(w) if w == "use" => {
                let line = t[i].line;
                i += 1;
                let mut trees = Vec::new();
                use_tree(&t, &mut i, Vec::new(), &mut trees);
                out.extend(trees.into_iter().map(|(p, _)| (p, here(), line)));
                continue;
            }
            Tok::Ident(first) if sep(t.get(i + 1)) && !sep(t.get(i.wrapping_sub(1))) => {
                let line = t[i].line;
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while sep(t.get(j)) {
                    match ident(t.get(j + 1)) {
                        Some(s) => path.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                out.push((path, here(), line));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The files of a crate and their imports, resolved to the file defining each named module.
struct Graph {
    /// Files relative to src/, sorted.
    files: Vec<String>,
    /// Per file: `(import, target file)`.
    edges: Vec<Vec<(Import, String)>>,
}

impl Graph {
    /// `sources`: `(path relative to src/, text)`.
    fn build(sources: &[(String, String)]) -> Graph {
        let mut modules = std::collections::BTreeMap::new();
        for (rel, text) in sources {
            if rel == "main.rs" {
                continue;
            }
            let module = module_of(rel);
            for name in inline_modules(text) {
                let mut m = module.clone();
                m.push(name);
                modules.insert(m, rel.clone());
            }
            modules.insert(module, rel.clone());
        }
        let files: Vec<String> = sources.iter().map(|(r, _)| r.clone()).collect();
        let edges = sources
            .iter()
            .map(|(rel, text)| {
                let mut out = Vec::new();
                for (path, here, line) in written_paths(text, &module_of(rel)) {
                    let Some(module) = resolve(&path, &here, &modules) else {
                        continue;
                    };
                    let target = (0..=module.len())
                        .rev()
                        .find_map(|n| modules.get(&module[..n]))
                        .cloned();
                    if let Some(target) = target.filter(|t| t != rel) {
                        let shown: Vec<&str> = path
                            .iter()
                            .enumerate()
                            .filter(|(i, s)| *i == 0 || *s != "self")
                            .map(|(_, s)| s.as_str())
                            .collect();
                        let import = Import {
                            written: shown.join("::"),
                            module,
                            line,
                        };
                        out.push((import, target));
                    }
                }
                out
            })
            .collect();
        Graph { files, edges }
    }

    /// Imports of the files whose path starts with `prefix` naming a module under `module`.
    fn imports_of(&self, prefix: &str, module: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for (file, edges) in self.files.iter().zip(&self.edges) {
            if !file.starts_with(prefix) {
                continue;
            }
            for (import, _) in edges {
                if import.module.len() >= module.len()
                    && import.module.iter().zip(module).all(|(a, b)| a == b)
                {
                    found.push(format!("src/{file}:{}: {}", import.line, import.written));
                }
            }
        }
        found.sort();
        found.dedup();
        found
    }

    /// The strongly connected components of more than one file (Tarjan), each sorted.
    fn circles(&self) -> Vec<Vec<String>> {
        let index_of = |f: &str| self.files.iter().position(|x| x == f);
        let succ: Vec<Vec<usize>> = self
            .edges
            .iter()
            .map(|e| {
                let mut s: Vec<usize> = e.iter().filter_map(|(_, t)| index_of(t)).collect();
                s.sort_unstable();
                s.dedup();
                s
            })
            .collect();
        let n = succ.len();
        let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
        let (mut on_stack, mut stack, mut next, mut out) =
            (vec![false; n], Vec::new(), 0, Vec::new());
        // Iterative Tarjan: (node, next successor to visit).
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            let mut work = vec![(root, 0usize)];
            while let Some((v, k)) = work.pop() {
                if k == 0 {
                    index[v] = next;
                    low[v] = next;
                    next += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if let Some(&w) = succ[v].get(k) {
                    work.push((v, k + 1));
                    if index[w] == usize::MAX {
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                if low[v] == index[v] {
                    let mut scc = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        scc.push(self.files[w].clone());
                        if w == v {
                            break;
                        }
                    }
                    if scc.len() > 1 {
                        scc.sort();
                        out.push(scc);
                    }
                }
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
            }
        }
        out.sort();
        out
    }

    /// A circle shown with the imports that make it.
    fn explain(&self, circle: &[String]) -> String {
        let mut lines = vec![format!(
            "circle of {} files: {}",
            circle.len(),
            circle.join(", ")
        )];
        for (file, edges) in self.files.iter().zip(&self.edges) {
            if !circle.contains(file) {
                continue;
            }
            let mut seen = std::collections::BTreeSet::new();
            for (import, target) in edges {
                if circle.contains(target) && seen.insert(target.clone()) {
                    lines.push(format!(
                        "  src/{file}:{} → src/{target} ({})",
                        import.line, import.written
                    ));
                }
            }
        }
        lines.join("\n")
    }
}

/// Names of the inline modules of `text` (outside `#[cfg(test)]`).
fn inline_modules(text: &str) -> Vec<String> {
    let t = tokenize(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if punct(t.get(i), '#')
            && ident(t.get(i + 2)) == Some("cfg")
            && ident(t.get(i + 4)) == Some("test")
            && punct(t.get(i + 5), ')')
        {
            i = skip_item(&t, i + 7);
            continue;
        }
        if ident(t.get(i)) == Some("mod")
            && punct(t.get(i + 2), '{')
            && let Some(name) = ident(t.get(i + 1))
        {
            out.push(name.to_string());
        }
        i += 1;
    }
    out
}

/// The module a path written in module `here` names, from the crate root; `None` for paths
/// into other crates (and the standard library).
fn resolve(
    path: &[String],
    here: &[String],
    modules: &std::collections::BTreeMap<Vec<String>, String>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut out: Vec<String>;
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" | "magnum_capi" => out = Vec::new(),
        "self" => out = here.to_vec(),
        "super" => {
            out = here.to_vec();
            out.pop();
            while rest.first().is_some_and(|s| s == "super") {
                out.pop();
                rest = &rest[1..];
            }
        }
        child => {
            // A child module named without `self::` (edition 2018 paths).
            let mut m = here.to_vec();
            m.push(child.to_string());
            if !modules.contains_key(&m) {
                return None;
            }
            out = here.to_vec();
            rest = path;
        }
    }
    out.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(out)
}

/// Every `.rs` file under src/ as `(path relative to src/, text)`.
fn crate_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: Vec<(String, String)> = sources("")
        .into_iter()
        .map(|(path, text)| {
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, text)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let graph = Graph::build(&crate_sources());
    let circles: Vec<String> = graph.circles().iter().map(|c| graph.explain(c)).collect();
    assert!(
        circles.is_empty(),
        "{} import circle(s) between files of src/:\n{}",
        circles.len(),
        circles.join("\n")
    );
}

/// Asserts that no file of src/ under `prefix` imports anything of `module`.
fn assert_never_imports(graph: &Graph, prefix: &str, module: &str) {
    let parts: Vec<&str> = module.split("::").collect();
    let found = graph.imports_of(prefix, &parts);
    assert!(
        found.is_empty(),
        "src/{prefix} must not import crate::{module}:\n{}",
        found.join("\n")
    );
}

#[test]
fn rendering_and_applying_know_no_persistence() {
    let graph = Graph::build(&crate_sources());
    for prefix in ["capi/render.rs", "capi/apply.rs"] {
        assert_never_imports(&graph, prefix, "db");
    }
}

#[test]
fn the_values_know_no_persistence() {
    assert_never_imports(&Graph::build(&crate_sources()), "capi/values/", "db");
}

#[test]
fn the_backends_know_no_persistence() {
    assert_never_imports(&Graph::build(&crate_sources()), "driver/", "db");
}

#[test]
fn the_driver_knows_no_persistence() {
    let graph = Graph::build(&crate_sources());
    assert_never_imports(&graph, "capi/", "db");
    assert_never_imports(&graph, "driver/", "db");
}

/// Cluster statuses move by a request (the service layer, in its transaction), by the worker
/// (an operation's outcome) or by the status writer (what the management cluster reports):
/// nothing else reaches `db::status`.
#[test]
fn only_requests_the_worker_and_the_status_writer_move_statuses() {
    let graph = Graph::build(&crate_sources());
    let writers: Vec<String> = graph
        .imports_of("", &["db", "status"])
        .into_iter()
        .filter(|i| {
            let file = i.trim_start_matches("src/").split(':').next().unwrap_or("");
            !(file.starts_with("service/")
                || file.starts_with("db/")
                || file == "worker.rs"
                || file == "status_writer.rs")
        })
        .collect();
    assert!(
        writers.is_empty(),
        "only requests, the worker and the status writer write statuses:\n{}",
        writers.join("\n")
    );
}

#[test]
fn the_simulator_shares_no_code_with_the_driver_or_the_database() {
    let graph = Graph::build(&crate_sources());
    assert_never_imports(&graph, "simkube/", "db");
    assert_never_imports(&graph, "simkube/", "capi");
}

/// The circle finder on a small crate: `super`, nested use trees, child modules named bare,
/// re-exports, inline modules; strings, comments and `#[cfg(test)]` items do not count.
#[test]
fn the_circle_finder_reads_paths_as_the_compiler_does() {
    let file = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    let sources = vec![
        file("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        file(
            "a/mod.rs",
            "//! a\nmod x;\npub use x::Thing;\nconst S: &str = \"use crate::c::No;\";\n\
             // use crate::c::No;\n/* crate::c::no() /* nested */ crate::c::no() */\n\
             const R: &str = r#\"crate::c::no()\"#;\nfn f<'a>(s: &'a str) -> char { 'x' }\n",
        ),
        file(
            "a/x.rs",
            "use super::super::b::{self, deep::{Y, Z as _}};\npub struct Thing;\n\
             #[cfg(test)]\nmod tests { use crate::c::Tested; }\n",
        ),
        file("b/mod.rs", "pub mod deep;\n"),
        file(
            "b/deep.rs",
            "pub struct Y;\npub struct Z;\npub fn g() { let _ = crate::c::kinds::K; }\n",
        ),
        file(
            "c.rs",
            "pub mod kinds { pub const K: u8 = super::super::a::ONE; }\n\
             #[cfg(test)]\nfn only_in_tests() { crate::b::deep::g(); }\n",
        ),
    ];
    let graph = Graph::build(&sources);
    let edges = |from: &str| -> Vec<String> {
        let i = graph.files.iter().position(|f| f == from).unwrap();
        let mut t: Vec<String> = graph.edges[i].iter().map(|(_, t)| t.clone()).collect();
        t.sort();
        t.dedup();
        t
    };
    assert_eq!(
        edges("lib.rs"),
        Vec::<String>::new(),
        "`mod x;` is not an import"
    );
    assert_eq!(
        edges("a/mod.rs"),
        ["a/x.rs"],
        "strings and comments do not import"
    );
    assert_eq!(
        edges("a/x.rs"),
        ["b/deep.rs", "b/mod.rs"],
        "test modules do not import"
    );
    assert_eq!(
        edges("b/deep.rs"),
        ["c.rs"],
        "inline modules live in their file"
    );
    assert_eq!(edges("c.rs"), ["a/mod.rs"], "`super` from an inline module");
    assert_eq!(
        graph.circles(),
        [vec!["a/mod.rs", "a/x.rs", "b/deep.rs", "c.rs"]],
        "a → x → deep → c → a"
    );
    assert_eq!(
        graph.imports_of("a/", &["b", "deep"]),
        [
            "src/a/x.rs:1: super::super::b::deep::Y",
            "src/a/x.rs:1: super::super::b::deep::Z"
        ]
    );
}
