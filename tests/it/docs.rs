//! The README and the guides in `docs/`: every relative link and `#anchor` resolves (GitHub's
//! heading slugs), the README stays short and links every guide.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// A line without its code spans (`…`), where nothing is a link.
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The targets of the inline links `[text](target)` of a line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        targets.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, `-`, `_`
/// and spaces kept), spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a page: its headings' slugs, a repeated one suffixed `-1`, `-2`, … as GitHub
/// does.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// What is wrong with one link of `page` (None: it resolves).
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|e| e != "md") {
        return Some(format!("#{anchor} on a file that is not Markdown"));
    }
    let text = std::fs::read_to_string(&file).unwrap();
    (!anchors(&text).iter().any(|a| a == anchor))
        .then(|| format!("no heading of {} has the anchor #{anchor}", file.display()))
}

#[test]
fn every_relative_link_and_anchor_of_the_readme_and_the_guides_resolves() {
    let mut failures = Vec::new();
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                links += 1;
                if let Some(why) = broken(&page, &target) {
                    let name = page.strip_prefix(root()).unwrap().display().to_string();
                    failures.push(format!("{name}:{n}: ({target}): {why}"));
                }
            }
        }
    }
    assert!(
        links > 20,
        "only {links} links found: is the parser broken?"
    );
    assert!(
        failures.is_empty(),
        "links that do not resolve:\n{}",
        failures.join("\n")
    );
}

#[test]
fn anchors_follow_githubs_heading_slugs() {
    let text = "# Operating\n## Health, readiness and `check`\n```\n## not a heading\n```\n\
                ## Development mode: `serve --dev`\n## Logs\n## Logs\n";
    assert_eq!(
        anchors(text),
        [
            "operating",
            "health-readiness-and-check",
            "development-mode-serve---dev",
            "logs",
            "logs-1"
        ]
    );
    let page = root().join("README.md");
    assert!(broken(&page, "docs/operate.md#no-such-heading").is_some());
    assert!(broken(&page, "docs/no-such-page.md").is_some());
    assert!(broken(&page, "docs/operate.md#logs").is_none());
    assert_eq!(
        link_targets("see [a](x.md#y) and `[not](a-link)` or [b](https://e.org)"),
        ["x.md#y", "https://e.org"]
    );
}

#[test]
fn the_readme_is_short_and_links_every_guide() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 250,
        "README.md has {lines} lines: move detail to docs/"
    );
    let linked: Vec<String> = prose(&readme)
        .into_iter()
        .flat_map(|(_, l)| link_targets(l))
        .collect();
    for page in pages().iter().skip(1) {
        let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        assert!(
            linked
                .iter()
                .any(|t| t.split('#').next() == Some(name.as_str())),
            "README.md does not link {name}"
        );
    }
}
