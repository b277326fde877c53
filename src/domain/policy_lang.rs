//! oslo.policy's rule language: parsing, evaluation, Magnum's default rules and operator policy files.
//!
//! The language is the one of `oslo_policy._parser` / `oslo_policy._checks`:
//!
//! * checks: `@` (always), `!` (never), `role:X` (case-insensitive role match, `X` may use
//!   `%(attr)s` from the target), `rule:NAME` (another rule), and the generic `kind:match`
//!   check, which compares the credential attribute `kind` (a dotted path; `roles` is a list and
//!   matches if any element does) — or, when `kind` is a Python literal such as `'member'` or
//!   `True`, that literal's `str()` — with `match` after `%(attr)s` substitution from the target:
//!   `project_id:%(project_id)s`, `user_id:%(user_id)s`, `is_admin:True`, `'p1':%(project_id)s`;
//! * operators `not` > `and` > `or` (case-insensitive), parentheses; the empty string always passes.
//!
//! Differences from oslo.policy, all on the strict side: a check string oslo.policy would log
//! and treat as `!` ("Failed to understand rule") is a [`PolicyError::Parse`] here; `http:`/`https:`
//! checks, `%` formats other than `%(name)s` / `%%`, the old list-of-lists syntax, non-string
//! values, reference cycles between rules and rule chains deeper than [`MAX_RULE_DEPTH`] are
//! rejected at load time; nesting deeper than [`MAX_NESTING`] is rejected. Enforcing a rule that is
//! not defined is [`PolicyError::Unknown`] (oslo.policy denies); a `rule:NAME` reference to an
//! undefined rule denies, as in oslo.policy.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::pyliteral;

/// Maximum nesting of parentheses and `not` inside one check string.
pub const MAX_NESTING: usize = 32;
/// Maximum length of a chain of `rule:NAME` references.
pub const MAX_RULE_DEPTH: usize = 20;

/// The caller, as oslo.policy sees Magnum's `context.to_dict()`.
#[derive(Debug, Clone, Copy)]
pub struct Credentials<'a> {
    pub user_id: &'a str,
    pub project_id: &'a str,
    /// Role names; Keystone implied roles are expected to be expanded already.
    pub roles: &'a [String],
    /// The request context's `is_admin` (the result of `context_is_admin`), for `is_admin:True`.
    pub is_admin: bool,
}

/// The object a rule is checked against (Magnum's target dict).
#[derive(Debug, Clone, Copy)]
pub struct TargetDict<'a> {
    pub project_id: &'a str,
    pub user_id: &'a str,
}

/// Why a policy could not be loaded or a rule not enforced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A check string that does not parse (or a rule that cannot be used as written).
    #[error(
        "invalid policy rule \"{rule}\"{}: {message}",
        .line.map(|l| format!(" at line {l}")).unwrap_or_default()
    )]
    Parse {
        rule: String,
        /// 1-based line of the rule in the policy file, when it came from one.
        line: Option<usize>,
        message: String,
    },
    /// Enforcing a rule that is not defined.
    #[error("policy rule \"{0}\" is not defined")]
    Unknown(String),
    /// The policy file itself is unreadable (YAML syntax, not a mapping).
    #[error("invalid policy file: {0}")]
    File(String),
}

// ---------------------------------------------------------------------------------------------
// Magnum's defaults (magnum/common/policies/*.py, enforce_new_defaults = True)
// ---------------------------------------------------------------------------------------------

const ADMIN: &str = "rule:context_is_admin";
const ADMIN_OR_READER: &str = "rule:admin_or_project_reader";
const ADMIN_OR_MEMBER: &str = "rule:admin_or_project_member";
const ADMIN_OR_MEMBER_DENY: &str = "rule:admin_or_project_member_deny_cluster_user";
const ADMIN_OR_READER_DENY: &str = "rule:admin_or_project_reader_deny_cluster_user";

/// `(name, check string)` of every default rule, in Magnum's registration order.
const DEFAULT_RULES: &[(&str, &str)] = &[
    // base.py
    ("context_is_admin", "role:admin"),
    (
        "admin_or_owner",
        "is_admin:True or project_id:%(project_id)s",
    ),
    ("admin_or_user", "is_admin:True or user_id:%(user_id)s"),
    ("is_user", "user_id:%(user_id)s"),
    (
        "project_member",
        "role:member and project_id:%(project_id)s",
    ),
    (
        "project_reader",
        "role:reader and project_id:%(project_id)s",
    ),
    (
        "admin_or_project_reader",
        "(rule:context_is_admin) or (rule:project_reader)",
    ),
    (
        "admin_or_project_member",
        "(rule:context_is_admin) or (rule:project_member)",
    ),
    (
        "admin_or_project_member_user",
        "(rule:context_is_admin) or ((rule:project_member) and (rule:is_user))",
    ),
    (
        "admin_or_project_member_user_or_cluster_user",
        "(rule:context_is_admin) or ((rule:project_member) and (rule:is_user))",
    ),
    ("project_member_deny_cluster_user", "(rule:project_member)"),
    (
        "admin_or_project_member_deny_cluster_user",
        "(rule:context_is_admin) or (rule:project_member)",
    ),
    ("project_reader_deny_cluster_user", "(rule:project_reader)"),
    (
        "admin_or_project_reader_deny_cluster_user",
        "(rule:context_is_admin) or (rule:project_reader)",
    ),
    (
        "admin_or_project_reader_user",
        "(rule:context_is_admin) or ((rule:project_reader) and (rule:is_user))",
    ),
    // Names from earlier Magnum releases (before the trustee user was removed), kept so that
    // operator files referring to them keep working. With no trustee attributes in the target,
    // `cluster_user` never matches and `deny_cluster_user` always does, i.e. they behave like the
    // current defaults.
    ("admin_api", "rule:context_is_admin"),
    ("cluster_user", "user_id:%(trustee_user_id)s"),
    ("deny_cluster_user", "not domain_id:%(trustee_domain_id)s"),
    (
        "user_or_cluster_user",
        "((rule:is_user) or (rule:cluster_user))",
    ),
    (
        "admin_or_user_or_cluster_user",
        "((rule:context_is_admin) or (rule:user_or_cluster_user))",
    ),
    (
        "admin_or_project_member_cluster_user",
        "(rule:context_is_admin) or ((rule:project_member) and (rule:cluster_user))",
    ),
    // certificate.py
    ("certificate:create", "rule:admin_or_project_member_user"),
    ("certificate:get", "rule:admin_or_project_reader_user"),
    ("certificate:rotate_ca", ADMIN_OR_MEMBER),
    // cluster.py
    ("cluster:create", ADMIN_OR_MEMBER_DENY),
    ("cluster:delete", ADMIN_OR_MEMBER_DENY),
    ("cluster:delete_all_projects", ADMIN),
    ("cluster:detail", ADMIN_OR_READER_DENY),
    ("cluster:detail_all_projects", ADMIN),
    ("cluster:get", ADMIN_OR_READER_DENY),
    ("cluster:get_one_all_projects", ADMIN),
    ("cluster:get_all", ADMIN_OR_READER_DENY),
    ("cluster:get_all_all_projects", ADMIN),
    ("cluster:update", ADMIN_OR_MEMBER_DENY),
    (
        "cluster:update_health_status",
        "rule:admin_or_project_member_user_or_cluster_user",
    ),
    ("cluster:update_all_projects", ADMIN),
    ("cluster:resize", ADMIN_OR_MEMBER_DENY),
    ("cluster:upgrade", ADMIN_OR_MEMBER_DENY),
    ("cluster:upgrade_all_projects", ADMIN),
    // cluster_template.py
    ("clustertemplate:create", ADMIN_OR_MEMBER_DENY),
    ("clustertemplate:delete", ADMIN_OR_MEMBER),
    ("clustertemplate:delete_all_projects", ADMIN),
    ("clustertemplate:detail_all_projects", ADMIN),
    ("clustertemplate:detail", ADMIN_OR_READER_DENY),
    ("clustertemplate:get", ADMIN_OR_READER_DENY),
    ("clustertemplate:get_one_all_projects", ADMIN),
    ("clustertemplate:get_all", ADMIN_OR_READER_DENY),
    ("clustertemplate:get_all_all_projects", ADMIN),
    ("clustertemplate:update", ADMIN_OR_MEMBER),
    ("clustertemplate:update_all_projects", ADMIN),
    ("clustertemplate:publish", ADMIN),
    // credential.py
    ("credential:rotate", "rule:project_member_deny_cluster_user"),
    // federation.py
    ("federation:create", ADMIN_OR_MEMBER_DENY),
    ("federation:delete", ADMIN_OR_MEMBER_DENY),
    ("federation:detail", ADMIN_OR_READER_DENY),
    ("federation:get", ADMIN_OR_READER_DENY),
    ("federation:get_all", ADMIN_OR_READER_DENY),
    ("federation:update", ADMIN_OR_MEMBER_DENY),
    // magnum_service.py
    ("magnum-service:get_all", ADMIN),
    // quota.py
    ("quota:create", ADMIN),
    ("quota:delete", ADMIN),
    ("quota:get", ADMIN_OR_READER),
    ("quota:get_all", ADMIN),
    ("quota:update", ADMIN),
    // stats.py
    ("stats:get_all", ADMIN_OR_READER),
    // nodegroup.py
    ("nodegroup:get", ADMIN_OR_READER),
    ("nodegroup:get_all", ADMIN_OR_READER),
    ("nodegroup:get_all_all_projects", ADMIN),
    ("nodegroup:get_one_all_projects", ADMIN),
    ("nodegroup:create", ADMIN_OR_MEMBER),
    ("nodegroup:delete", ADMIN_OR_MEMBER),
    ("nodegroup:update", ADMIN_OR_MEMBER),
];

// ---------------------------------------------------------------------------------------------
// Check tree
// ---------------------------------------------------------------------------------------------

/// A `match` string after Python `%`-formatting against the target: literal text and `%(name)s`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Template(Vec<Piece>);

/// The left-hand side of a generic check.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `ast.literal_eval(kind)` succeeded: compare with this `str()`.
    Literal(String),
    /// A dotted path into the credentials.
    Path(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    True,
    False,
    Rule(String),
    Role(Template),
    Generic { kind: Kind, value: Template },
    Not(Box<Check>),
    And(Vec<Check>),
    Or(Vec<Check>),
}

impl Check {
    /// Names referenced with `rule:NAME`, in order.
    fn collect_refs<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Check::Rule(name) => out.push(name),
            Check::Not(inner) => inner.collect_refs(out),
            Check::And(items) | Check::Or(items) => {
                for item in items {
                    item.collect_refs(out);
                }
            }
            Check::True | Check::False | Check::Role(_) | Check::Generic { .. } => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    LParen,
    RParen,
    And,
    Or,
    Not,
    Check(Check),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::LParen => f.write_str("'('"),
            Token::RParen => f.write_str("')'"),
            Token::And => f.write_str("'and'"),
            Token::Or => f.write_str("'or'"),
            Token::Not => f.write_str("'not'"),
            Token::Check(_) => f.write_str("a check"),
        }
    }
}

/// Python's `str.isspace()` (what `re.split(r'\s+')` splits on), close enough.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `_parse_tokenize`: whitespace-separated words, with leading `(` and trailing `)` split off.
fn tokenize(rule: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    for word in rule.split(is_py_space).filter(|w| !w.is_empty()) {
        let clean = word.trim_start_matches('(');
        for _ in 0..(word.len() - clean.len()) {
            out.push(Token::LParen);
        }
        if clean.is_empty() {
            continue;
        }
        let tok = clean;
        let clean = tok.trim_end_matches(')');
        let trailing = tok.len() - clean.len();
        let lowered = clean.to_lowercase();
        match lowered.as_str() {
            "and" => out.push(Token::And),
            "or" => out.push(Token::Or),
            "not" => out.push(Token::Not),
            _ if clean.is_empty() => {}
            _ => {
                let mut chars = tok.chars();
                let first = chars.next();
                let last = chars.next_back();
                if matches!(
                    (first, last),
                    (Some('"'), Some('"')) | (Some('\''), Some('\''))
                ) {
                    return Err(format!("a quoted string ({tok}) is not a check"));
                }
                out.push(Token::Check(parse_check(clean)?));
            }
        }
        for _ in 0..trailing {
            out.push(Token::RParen);
        }
    }
    Ok(out)
}

/// `_parse_check`: one `kind:match` word (or `@` / `!`).
fn parse_check(word: &str) -> Result<Check, String> {
    match word {
        "@" => return Ok(Check::True),
        "!" => return Ok(Check::False),
        _ => {}
    }
    let Some((kind, matched)) = word.split_once(':') else {
        return Err(format!(
            "\"{word}\" is not a check (expected kind:match, @ or !)"
        ));
    };
    match kind {
        "rule" => Ok(Check::Rule(matched.to_owned())),
        "role" => Ok(Check::Role(parse_template(matched)?)),
        "http" | "https" => Err(format!(
            "remote {kind}: checks are not supported (\"{word}\")"
        )),
        "" => Err(format!("\"{word}\" has an empty kind")),
        _ => {
            let kind = match pyliteral::parse(kind) {
                Ok(v) => Kind::Literal(pyliteral::to_python_str(&v)),
                Err(_) => Kind::Path(kind.split('.').map(str::to_owned).collect()),
            };
            Ok(Check::Generic {
                kind,
                value: parse_template(matched)?,
            })
        }
    }
}

/// The subset of Python `match % target` that is meaningful: `%(name)s` and `%%`.
fn parse_template(s: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(pos) = rest.find('%') {
        text.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(r) = after.strip_prefix('%') {
            text.push('%');
            rest = r;
            continue;
        }
        let Some(inner) = after.strip_prefix('(') else {
            return Err(format!(
                "unsupported %-format in \"{s}\" (only %(name)s and %% are allowed)"
            ));
        };
        // Python matches nested parentheses inside the key.
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in inner.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return Err(format!("unterminated %( in \"{s}\""));
        };
        let name = &inner[..end];
        let Some(r) = inner[end + 1..].strip_prefix('s') else {
            return Err(format!(
                "unsupported %-format in \"{s}\" (only %(name)s and %% are allowed)"
            ));
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Var(name.to_owned()));
        rest = r;
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Template(pieces))
}

/// Recursive descent over the tokens; the grammar accepted by oslo.policy's shift-reduce parser:
/// `or := and ('or' and)*`, `and := not ('and' not)*`, `not := 'not' not | '(' or ')' | check`.
struct Parser {
    tokens: std::vec::IntoIter<Token>,
    peeked: Option<Token>,
}

impl Parser {
    fn peek(&mut self) -> Option<&Token> {
        if self.peeked.is_none() {
            self.peeked = self.tokens.next();
        }
        self.peeked.as_ref()
    }

    fn next(&mut self) -> Option<Token> {
        match self.peeked.take() {
            Some(t) => Some(t),
            None => self.tokens.next(),
        }
    }

    fn or_expr(&mut self, depth: usize) -> Result<Check, String> {
        let mut items = vec![self.and_expr(depth)?];
        while self.peek() == Some(&Token::Or) {
            self.next();
            items.push(self.and_expr(depth)?);
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Check::False)
        } else {
            Check::Or(items)
        })
    }

    fn and_expr(&mut self, depth: usize) -> Result<Check, String> {
        let mut items = vec![self.unary(depth)?];
        while self.peek() == Some(&Token::And) {
            self.next();
            items.push(self.unary(depth)?);
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Check::False)
        } else {
            Check::And(items)
        })
    }

    fn unary(&mut self, depth: usize) -> Result<Check, String> {
        if depth >= MAX_NESTING {
            return Err(format!(
                "nested deeper than {MAX_NESTING} levels of parentheses or 'not'"
            ));
        }
        match self.next() {
            Some(Token::Check(c)) => Ok(c),
            Some(Token::Not) => Ok(Check::Not(Box::new(self.unary(depth + 1)?))),
            Some(Token::LParen) => {
                let inner = self.or_expr(depth + 1)?;
                match self.next() {
                    Some(Token::RParen) => Ok(inner),
                    Some(t) => Err(format!("expected ')', found {t}")),
                    None => Err("missing ')'".to_owned()),
                }
            }
            Some(t) => Err(format!("expected a check, 'not' or '(', found {t}")),
            None => Err("unexpected end of rule: expected a check".to_owned()),
        }
    }
}

/// Parses one check string.
fn parse_rule(rule: &str) -> Result<Check, String> {
    if rule.is_empty() {
        return Ok(Check::True);
    }
    let tokens = tokenize(rule)?;
    if tokens.is_empty() {
        return Err("a rule of only whitespace is not valid (use \"\" or \"@\")".to_owned());
    }
    let mut p = Parser {
        tokens: tokens.into_iter(),
        peeked: None,
    };
    let check = p.or_expr(0)?;
    match p.next() {
        None => Ok(check),
        Some(t) => Err(format!("unexpected {t} after a complete expression")),
    }
}

// ---------------------------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------------------------

/// A set of named rules: Magnum's defaults, possibly overridden by an operator file.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Arc<HashMap<String, Check>>,
}

impl Policy {
    /// Every Magnum rule with its default check string.
    pub fn defaults() -> Policy {
        let rules = DEFAULT_RULES
            .iter()
            .map(|(name, check)| {
                // The defaults are tested to parse; a failure here would deny, never allow.
                let parsed = parse_rule(check).unwrap_or(Check::False);
                ((*name).to_owned(), parsed)
            })
            .collect();
        Policy {
            rules: Arc::new(rules),
        }
    }

    /// The defaults, overridden (and extended) by the rules of an oslo.policy YAML or JSON file.
    pub fn from_yaml_overrides(yaml: &str) -> Result<Policy, PolicyError> {
        let entries = read_file_entries(yaml)?;
        let lines: Vec<&str> = yaml.lines().collect();
        let mut rules = Policy::defaults().rules.as_ref().clone();
        let mut file_lines: HashMap<String, Option<usize>> = HashMap::new();
        let mut cursor = 0usize;
        for (name, value) in entries {
            let line = find_key_line(&lines, cursor, &name);
            if let Some(l) = line {
                cursor = l;
            }
            let parse_err = |message: String| PolicyError::Parse {
                rule: name.clone(),
                line,
                message,
            };
            let check_str = match value {
                yaml_serde::Value::String(s) => s,
                yaml_serde::Value::Null => {
                    return Err(parse_err(
                        "no check string (write \"\" to always allow)".to_owned(),
                    ));
                }
                yaml_serde::Value::Sequence(_) => {
                    return Err(parse_err(
                        "the old list-of-lists syntax is not supported; write a check string"
                            .to_owned(),
                    ));
                }
                _ => return Err(parse_err("the check string must be a string".to_owned())),
            };
            let check = parse_rule(&check_str).map_err(parse_err)?;
            rules.insert(name.clone(), check);
            file_lines.insert(name, line);
        }
        validate_references(&rules, &file_lines)?;
        Ok(Policy {
            rules: Arc::new(rules),
        })
    }

    /// Evaluates `rule` for `creds` against `target`.
    pub fn enforce(
        &self,
        rule: &str,
        creds: &Credentials,
        target: &TargetDict,
    ) -> Result<bool, PolicyError> {
        if !self.rules.contains_key(rule) {
            return Err(PolicyError::Unknown(rule.to_owned()));
        }
        let mut ev = Eval::new(self, creds, Some(target));
        Ok(ev.rule(rule))
    }

    /// Magnum's `check_is_admin`: `context_is_admin` with an empty target (denies if undefined).
    pub fn context_is_admin(&self, creds: &Credentials) -> bool {
        let mut ev = Eval::new(self, creds, None);
        ev.rule("context_is_admin")
    }

    /// Names of all defined rules (unordered).
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.keys().map(String::as_str)
    }
}

/// Rejects reference cycles and over-long `rule:` chains, so evaluation is bounded.
fn validate_references(
    rules: &HashMap<String, Check>,
    file_lines: &HashMap<String, Option<usize>>,
) -> Result<(), PolicyError> {
    #[derive(Clone, Copy)]
    enum State {
        InProgress,
        Done(usize),
    }
    fn visit<'a>(
        name: &'a str,
        rules: &'a HashMap<String, Check>,
        state: &mut HashMap<&'a str, State>,
        path: &mut Vec<&'a str>,
    ) -> Result<usize, String> {
        match state.get(name) {
            Some(State::Done(h)) => return Ok(*h),
            Some(State::InProgress) => {
                let start = path.iter().position(|n| *n == name).unwrap_or(0);
                let mut cycle: Vec<&str> = path[start..].to_vec();
                cycle.push(name);
                return Err(format!(
                    "rule references form a cycle: {}",
                    cycle.join(" -> ")
                ));
            }
            None => {}
        }
        let Some(check) = rules.get(name) else {
            // Undefined reference: denies at evaluation, like oslo.policy.
            return Ok(0);
        };
        if path.len() >= MAX_RULE_DEPTH {
            return Err(format!(
                "rule references nest deeper than {MAX_RULE_DEPTH}: {} -> {name}",
                path.join(" -> ")
            ));
        }
        state.insert(name, State::InProgress);
        path.push(name);
        let mut refs = Vec::new();
        check.collect_refs(&mut refs);
        let mut height = 0;
        for r in refs {
            height = height.max(visit(r, rules, state, path)? + 1);
        }
        path.pop();
        state.insert(name, State::Done(height));
        Ok(height)
    }

    let mut state = HashMap::new();
    // Visit rules from the file first so an error names (and locates) a rule the operator wrote.
    let mut names: Vec<&str> = file_lines.keys().map(String::as_str).collect();
    names.sort_by_key(|n| file_lines.get(*n).copied().flatten().unwrap_or(usize::MAX));
    let mut rest: Vec<&str> = rules
        .keys()
        .map(String::as_str)
        .filter(|n| !file_lines.contains_key(*n))
        .collect();
    rest.sort_unstable();
    names.extend(rest);
    for name in names {
        let mut path = Vec::new();
        visit(name, rules, &mut state, &mut path).map_err(|message| PolicyError::Parse {
            rule: name.to_owned(),
            line: file_lines.get(name).copied().flatten(),
            message,
        })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

struct Eval<'p, 'c> {
    policy: &'p Policy,
    creds: &'c Credentials<'c>,
    target: Option<&'c TargetDict<'c>>,
    memo: HashMap<&'p str, bool>,
    stack: Vec<&'p str>,
}

impl<'p, 'c> Eval<'p, 'c> {
    fn new(
        policy: &'p Policy,
        creds: &'c Credentials<'c>,
        target: Option<&'c TargetDict<'c>>,
    ) -> Self {
        Eval {
            policy,
            creds,
            target,
            memo: HashMap::new(),
            stack: Vec::new(),
        }
    }

    fn rule(&mut self, name: &str) -> bool {
        let Some((key, check)) = self.policy.rules.get_key_value(name) else {
            return false;
        };
        let key = key.as_str();
        if let Some(v) = self.memo.get(key) {
            return *v;
        }
        // Guard against cycles and runaway chains (load-time validation already rejects them).
        if self.stack.contains(&key) || self.stack.len() >= MAX_RULE_DEPTH {
            return false;
        }
        self.stack.push(key);
        let v = self.check(check);
        self.stack.pop();
        self.memo.insert(key, v);
        v
    }

    fn check(&mut self, check: &'p Check) -> bool {
        match check {
            Check::True => true,
            Check::False => false,
            Check::Rule(name) => self.rule(name),
            Check::Not(inner) => !self.check(inner),
            Check::And(items) => items.iter().all(|c| self.check(c)),
            Check::Or(items) => items.iter().any(|c| self.check(c)),
            Check::Role(t) => match self.render(t) {
                Some(role) => {
                    let role = role.to_lowercase();
                    self.creds.roles.iter().any(|r| r.to_lowercase() == role)
                }
                None => false,
            },
            Check::Generic { kind, value } => {
                let Some(value) = self.render(value) else {
                    return false;
                };
                match kind {
                    Kind::Literal(lit) => *lit == value,
                    Kind::Path(path) => self.creds_match(path, &value),
                }
            }
        }
    }

    /// `match % target`; `None` when a `%(name)s` is missing from the target (oslo: KeyError → deny).
    fn render(&self, t: &Template) -> Option<String> {
        let mut out = String::new();
        for piece in &t.0 {
            match piece {
                Piece::Text(s) => out.push_str(s),
                Piece::Var(name) => {
                    let target = self.target?;
                    match name.as_str() {
                        "project_id" => out.push_str(target.project_id),
                        "user_id" => out.push_str(target.user_id),
                        _ => return None,
                    }
                }
            }
        }
        Some(out)
    }

    /// `GenericCheck._find_in_dict` over the credential attributes Magnum passes.
    fn creds_match(&self, path: &[String], value: &str) -> bool {
        let [key] = path else {
            // Every credential attribute here is a leaf; deeper paths find nothing.
            return false;
        };
        match key.as_str() {
            "user_id" => self.creds.user_id == value,
            "project_id" => self.creds.project_id == value,
            "is_admin" => (if self.creds.is_admin { "True" } else { "False" }) == value,
            "roles" => self.creds.roles.iter().any(|r| r == value),
            _ => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Policy files
// ---------------------------------------------------------------------------------------------

/// The top-level mapping of a policy file, in document order, duplicates kept (last one wins,
/// as with PyYAML's `safe_load`).
struct Entries(Vec<(yaml_serde::Value, yaml_serde::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of rule names to check strings")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Entries, E> {
                Ok(Entries(Vec::new()))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Entries, E> {
                Ok(Entries(Vec::new()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_any(V)
    }
}

fn read_file_entries(text: &str) -> Result<Vec<(String, yaml_serde::Value)>, PolicyError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let Entries(raw) =
        yaml_serde::from_str::<Entries>(text).map_err(|e| PolicyError::File(e.to_string()))?;
    let mut out = Vec::with_capacity(raw.len());
    for (k, v) in raw {
        match k {
            yaml_serde::Value::String(name) => out.push((name, v)),
            other => {
                let shown = yaml_serde::to_string(&other).unwrap_or_default();
                return Err(PolicyError::File(format!(
                    "rule names must be strings, found {}",
                    shown.trim()
                )));
            }
        }
    }
    Ok(out)
}

/// 1-based line on which `key` is written as a mapping key, searching from line index `from`
/// (the previous key's line), then the same line, then anywhere.
fn find_key_line(lines: &[&str], from: usize, key: &str) -> Option<usize> {
    let starts = [from, from.saturating_sub(1), 0];
    for start in starts {
        if let Some(i) = (start..lines.len()).find(|&i| line_starts_with_key(lines[i], key)) {
            return Some(i + 1);
        }
    }
    // Several keys on one line (single-line JSON / flow mapping): look for `"key":` anywhere.
    let quoted = serde_json::to_string(key).ok()?;
    for start in [from.saturating_sub(1), 0] {
        for (i, line) in lines.iter().enumerate().skip(start) {
            let mut hay = *line;
            while let Some(pos) = hay.find(&quoted) {
                let after = hay[pos + quoted.len()..].trim_start();
                if after.starts_with(':') {
                    return Some(i + 1);
                }
                hay = &hay[pos + quoted.len()..];
            }
        }
    }
    None
}

fn line_starts_with_key(line: &str, key: &str) -> bool {
    let s = line.trim_start_matches(|c: char| c.is_whitespace() || c == '{' || c == ',');
    let (found, rest) = if let Some(body) = s.strip_prefix('"') {
        // JSON / YAML double-quoted: find the closing unescaped quote.
        let mut escaped = false;
        let mut end = None;
        for (i, c) in body.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return false;
        };
        let decoded: Option<String> = serde_json::from_str(&s[..end + 2]).ok();
        (decoded, &body[end + 1..])
    } else if let Some(body) = s.strip_prefix('\'') {
        // YAML single-quoted: '' is an escaped quote.
        let mut out = String::new();
        let mut chars = body.char_indices().peekable();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().map(|(_, n)| *n) == Some('\'') {
                    out.push('\'');
                    chars.next();
                } else {
                    end = Some(i);
                    break;
                }
            } else {
                out.push(c);
            }
        }
        let Some(end) = end else {
            return false;
        };
        (Some(out), &body[end + 1..])
    } else {
        // Plain YAML key: the key text followed by `:` and whitespace (or end of line).
        let Some(rest) = s.strip_prefix(key) else {
            return false;
        };
        let rest = rest.trim_start_matches([' ', '\t']);
        let Some(after) = rest.strip_prefix(':') else {
            return false;
        };
        return after.is_empty() || after.starts_with(char::is_whitespace);
    };
    found.as_deref() == Some(key) && rest.trim_start().starts_with(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "p-owner";
    const U: &str = "u-creator";

    fn roles(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    fn target() -> TargetDict<'static> {
        TargetDict {
            project_id: P,
            user_id: U,
        }
    }

    /// A caller; roles as Keystone sends them, implied roles expanded.
    struct Persona {
        user: &'static str,
        project: &'static str,
        roles: Vec<String>,
    }

    impl Persona {
        fn creds(&self) -> Credentials<'_> {
            Credentials {
                user_id: self.user,
                project_id: self.project,
                roles: &self.roles,
                is_admin: self.roles.iter().any(|r| r == "admin"),
            }
        }
    }

    fn admin() -> Persona {
        // An admin of another project: admin rights come from the role, not the project.
        Persona {
            user: "u-admin",
            project: "p-admin",
            roles: roles(&["admin", "member", "reader"]),
        }
    }
    fn member() -> Persona {
        Persona {
            user: U,
            project: P,
            roles: roles(&["member", "reader"]),
        }
    }
    fn other_project_member() -> Persona {
        Persona {
            user: U,
            project: "p-other",
            roles: roles(&["member", "reader"]),
        }
    }
    fn reader() -> Persona {
        Persona {
            user: U,
            project: P,
            roles: roles(&["reader"]),
        }
    }
    fn non_creator_member() -> Persona {
        Persona {
            user: "u-colleague",
            project: P,
            roles: roles(&["member", "reader"]),
        }
    }
    fn non_creator_reader() -> Persona {
        Persona {
            user: "u-colleague",
            project: P,
            roles: roles(&["reader"]),
        }
    }

    fn allowed(policy: &Policy, rule: &str, who: &Persona) -> bool {
        match policy.enforce(rule, &who.creds(), &target()) {
            Ok(v) => v,
            Err(e) => panic!("{rule}: {e}"),
        }
    }

    /// (rule, admin, member of the owning project, member of another project, reader,
    ///  member who is not the creator)
    const EXPECTED: &[(&str, bool, bool, bool, bool, bool)] = &[
        ("cluster:create", true, true, false, false, true),
        ("cluster:delete", true, true, false, false, true),
        ("cluster:update", true, true, false, false, true),
        ("cluster:resize", true, true, false, false, true),
        ("cluster:upgrade", true, true, false, false, true),
        ("cluster:get", true, true, false, true, true),
        ("cluster:get_all", true, true, false, true, true),
        ("cluster:detail", true, true, false, true, true),
        (
            "cluster:update_health_status",
            true,
            true,
            false,
            false,
            false,
        ),
        (
            "cluster:get_all_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "cluster:detail_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "cluster:get_one_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "cluster:update_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "cluster:delete_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "cluster:upgrade_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        ("clustertemplate:create", true, true, false, false, true),
        ("clustertemplate:get", true, true, false, true, true),
        ("clustertemplate:get_all", true, true, false, true, true),
        ("clustertemplate:detail", true, true, false, true, true),
        ("clustertemplate:update", true, true, false, false, true),
        ("clustertemplate:delete", true, true, false, false, true),
        ("clustertemplate:publish", true, false, false, false, false),
        (
            "clustertemplate:get_all_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "clustertemplate:detail_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "clustertemplate:get_one_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "clustertemplate:update_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "clustertemplate:delete_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        ("nodegroup:get", true, true, false, true, true),
        ("nodegroup:get_all", true, true, false, true, true),
        ("nodegroup:create", true, true, false, false, true),
        ("nodegroup:update", true, true, false, false, true),
        ("nodegroup:delete", true, true, false, false, true),
        (
            "nodegroup:get_all_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "nodegroup:get_one_all_projects",
            true,
            false,
            false,
            false,
            false,
        ),
        ("certificate:get", true, true, false, true, false),
        ("certificate:create", true, true, false, false, false),
        ("certificate:rotate_ca", true, true, false, false, true),
        // project_member: no admin shortcut (the admin persona is in another project).
        ("credential:rotate", false, true, false, false, true),
        ("quota:create", true, false, false, false, false),
        ("quota:update", true, false, false, false, false),
        ("quota:delete", true, false, false, false, false),
        ("quota:get_all", true, false, false, false, false),
        ("quota:get", true, true, false, true, true),
        ("stats:get_all", true, true, false, true, true),
        ("magnum-service:get_all", true, false, false, false, false),
        ("federation:create", true, true, false, false, true),
        ("federation:update", true, true, false, false, true),
        ("federation:delete", true, true, false, false, true),
        ("federation:get", true, true, false, true, true),
        ("federation:get_all", true, true, false, true, true),
        ("federation:detail", true, true, false, true, true),
    ];

    #[test]
    fn every_default_parses() {
        for (name, check) in DEFAULT_RULES {
            assert!(parse_rule(check).is_ok(), "{name}: {check}");
        }
        let names: std::collections::HashSet<&str> =
            DEFAULT_RULES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), DEFAULT_RULES.len(), "duplicate default");
        // The defaults pass the same validation as an operator file.
        assert!(Policy::from_yaml_overrides("").is_ok());
    }

    #[test]
    fn every_api_rule_is_in_the_table() {
        let policy = Policy::defaults();
        let tested: std::collections::HashSet<&str> = EXPECTED.iter().map(|row| row.0).collect();
        for name in policy.rule_names().filter(|n| n.contains(':')) {
            assert!(tested.contains(name), "{name} is not covered");
        }
        assert_eq!(tested.len(), EXPECTED.len());
    }

    #[test]
    fn defaults_for_each_persona() {
        let policy = Policy::defaults();
        let (a, m, o, r, n) = (
            admin(),
            member(),
            other_project_member(),
            reader(),
            non_creator_member(),
        );
        for &(rule, ea, em, eo, er, en) in EXPECTED {
            assert_eq!(allowed(&policy, rule, &a), ea, "{rule} admin");
            assert_eq!(allowed(&policy, rule, &m), em, "{rule} member");
            assert_eq!(allowed(&policy, rule, &o), eo, "{rule} other project");
            assert_eq!(allowed(&policy, rule, &r), er, "{rule} reader");
            assert_eq!(allowed(&policy, rule, &n), en, "{rule} non-creator");
        }
    }

    #[test]
    fn certificates_only_for_the_cluster_creator() {
        let policy = Policy::defaults();
        for rule in ["certificate:get", "certificate:create"] {
            assert!(!allowed(&policy, rule, &non_creator_member()), "{rule}");
            assert!(!allowed(&policy, rule, &non_creator_reader()), "{rule}");
            assert!(allowed(&policy, rule, &admin()), "{rule}");
        }
        assert!(allowed(&policy, "certificate:get", &reader()));
        assert!(!allowed(&policy, "certificate:create", &reader()));
    }

    #[test]
    fn unknown_rule() {
        let policy = Policy::defaults();
        let m = member();
        assert_eq!(
            policy.enforce("cluster:explode", &m.creds(), &target()),
            Err(PolicyError::Unknown("cluster:explode".into()))
        );
    }

    #[test]
    fn override_restricts_create_to_admins() {
        let policy = Policy::from_yaml_overrides(
            "# operator overrides\n\"cluster:create\": \"role:admin\"\n",
        )
        .unwrap();
        assert!(!allowed(&policy, "cluster:create", &member()));
        assert!(allowed(&policy, "cluster:create", &admin()));
        // Other rules keep their defaults.
        assert!(allowed(&policy, "cluster:delete", &member()));
    }

    #[test]
    fn override_of_a_base_rule_propagates() {
        let yaml =
            "project_member: role:member and project_id:%(project_id)s and user_id:%(user_id)s\n";
        let policy = Policy::from_yaml_overrides(yaml).unwrap();
        assert!(allowed(&policy, "cluster:create", &member()));
        assert!(!allowed(&policy, "cluster:create", &non_creator_member()));
        // The defaults are untouched.
        assert!(allowed(
            &Policy::defaults(),
            "cluster:create",
            &non_creator_member()
        ));
    }

    #[test]
    fn overrides_may_add_rules_and_use_legacy_names() {
        let yaml = r#"{
  "cluster:create": "rule:admin_api or rule:my_rule",
  "my_rule": "role:Creator"
}"#;
        let policy = Policy::from_yaml_overrides(yaml).unwrap();
        let c = Persona {
            user: "x",
            project: "y",
            roles: roles(&["creator"]),
        };
        assert!(allowed(&policy, "cluster:create", &c));
        assert!(allowed(&policy, "cluster:create", &admin()));
        assert!(!allowed(&policy, "cluster:create", &member()));
        assert!(allowed(&policy, "my_rule", &c));
    }

    #[test]
    fn bad_rule_reports_its_line() {
        let yaml = "# Magnum policy overrides\n\n\"cluster:create\": \"role:admin\"\n\"cluster:delete\": \"role:admin and\"\n\"cluster:get\": \"@\"\n";
        match Policy::from_yaml_overrides(yaml) {
            Err(PolicyError::Parse { rule, line, .. }) => {
                assert_eq!(rule, "cluster:delete");
                assert_eq!(line, Some(4));
            }
            other => panic!("{other:?}"),
        }
        let plain = "cluster:create: role:admin\ncluster:update: 'role:admin or (role:member'\n";
        match Policy::from_yaml_overrides(plain) {
            Err(PolicyError::Parse { rule, line, .. }) => {
                assert_eq!(rule, "cluster:update");
                assert_eq!(line, Some(2));
            }
            other => panic!("{other:?}"),
        }
        let json = "{\n  \"a\": \"@\",\n  \"b\": \"@\",\n  \"c\": \"foo\"\n}";
        match Policy::from_yaml_overrides(json) {
            Err(e @ PolicyError::Parse { .. }) => {
                assert!(e.to_string().contains("\"c\" at line 4"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let one_line = r#"{"a": "@", "b": "role:"}"#;
        assert!(Policy::from_yaml_overrides(one_line).is_ok());
        let one_line = r#"{"a": "@", "b": "role:x or"}"#;
        match Policy::from_yaml_overrides(one_line) {
            Err(PolicyError::Parse { rule, line, .. }) => {
                assert_eq!((rule.as_str(), line), ("b", Some(1)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn file_level_errors() {
        assert!(matches!(
            Policy::from_yaml_overrides("- a\n- b\n"),
            Err(PolicyError::File(_))
        ));
        assert!(matches!(
            Policy::from_yaml_overrides("a: [\n"),
            Err(PolicyError::File(_))
        ));
        assert!(matches!(
            Policy::from_yaml_overrides("1: role:admin\n"),
            Err(PolicyError::File(_))
        ));
        for (yaml, line) in [
            ("x: '@'\ncluster:create:\n", 2),
            ("cluster:create: [[\"role:admin\"]]\n", 1),
            ("x: '@'\n\ncluster:create: true\n", 3),
        ] {
            match Policy::from_yaml_overrides(yaml) {
                Err(PolicyError::Parse { rule, line: l, .. }) => {
                    assert_eq!((rule.as_str(), l), ("cluster:create", Some(line)), "{yaml}")
                }
                other => panic!("{yaml}: {other:?}"),
            }
        }
        // Empty and comment-only files are just the defaults.
        assert!(Policy::from_yaml_overrides("# nothing\n").is_ok());
        assert!(Policy::from_yaml_overrides("{}").is_ok());
    }

    #[test]
    fn duplicate_keys_last_one_wins() {
        let yaml = "cluster:create: '!'\ncluster:create: '@'\n";
        let policy = Policy::from_yaml_overrides(yaml).unwrap();
        assert!(allowed(&policy, "cluster:create", &reader()));
    }

    #[test]
    fn cycles_and_deep_chains_are_rejected() {
        let yaml = "a: rule:b\nb: 'role:x or rule:a'\n";
        match Policy::from_yaml_overrides(yaml) {
            Err(PolicyError::Parse {
                rule,
                line,
                message,
            }) => {
                assert_eq!((rule.as_str(), line), ("a", Some(1)));
                assert!(message.contains("cycle"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let chain: String = (0..30)
            .map(|i| format!("r{i}: rule:r{}\n", i + 1))
            .collect();
        assert!(matches!(
            Policy::from_yaml_overrides(&chain),
            Err(PolicyError::Parse { .. })
        ));
        // A reference to an undefined rule denies, as in oslo.policy.
        let policy = Policy::from_yaml_overrides("cluster:create: rule:nope or role:x\n").unwrap();
        assert!(!allowed(&policy, "cluster:create", &admin()));
    }

    fn eval(check: &str, who: &Persona) -> bool {
        let yaml = format!("t: {}\n", serde_json::to_string(check).unwrap());
        let policy = Policy::from_yaml_overrides(&yaml).unwrap();
        allowed(&policy, "t", who)
    }

    #[test]
    fn language() {
        let m = member();
        // constants and empty
        assert!(eval("", &m));
        assert!(eval("@", &m));
        assert!(!eval("!", &m));
        // precedence: not > and > or
        assert!(eval("@ or ! and !", &m));
        assert!(!eval("(@ or !) and !", &m));
        assert!(!eval("not @ and @", &m));
        assert!(eval("not (! and @)", &m));
        assert!(eval("not not @", &m));
        assert!(eval("! or ! or @", &m));
        assert!(eval("! and ! or @ and @", &m));
        assert!(eval("((@))", &m));
        assert!(eval("@ AND NOT ! Or !", &m));
        // roles: case-insensitive
        assert!(eval("role:MEMBER", &m));
        assert!(!eval("role:admin", &m));
        assert!(eval("role:%(user_id)s or role:member", &m));
        // generic checks
        assert!(eval("project_id:%(project_id)s", &m));
        assert!(eval("user_id:%(user_id)s", &m));
        assert!(!eval("user_id:%(user_id)s", &non_creator_member()));
        assert!(eval("project_id:p-owner", &m));
        assert!(!eval("project_id:%(nothing)s", &m));
        assert!(eval("is_admin:False", &m));
        assert!(!eval("is_admin:True", &m));
        assert!(eval("is_admin:True", &admin()));
        assert!(!eval("is_admin:true", &admin()), "oslo compares str(True)");
        assert!(eval("roles:member", &m));
        assert!(
            !eval("roles:Member", &m),
            "generic checks are case-sensitive"
        );
        assert!(eval("'p-owner':%(project_id)s", &m));
        assert!(eval("\"p-owner\":%(project_id)s", &m));
        assert!(!eval("'p-other':%(project_id)s", &m));
        assert!(eval("True:True", &m));
        assert!(!eval("domain_id:%(project_id)s", &m));
        assert!(eval("not domain_id:%(trustee_domain_id)s", &m));
        assert!(eval(
            "project_id:p%%-owner or project_id:%(project_id)s",
            &m
        ));
        // parentheses glued to checks
        assert!(eval("(role:member and (project_id:%(project_id)s))", &m));
    }

    #[test]
    fn parse_errors() {
        for bad in [
            " ",
            "role:admin and",
            "and role:admin",
            "(",
            ")",
            "(@",
            "@)",
            "()",
            "@ @",
            "not",
            "foo",
            "'quoted'",
            "\"quoted\"",
            "http://example.com/check",
            "role:%d",
            "role:100%",
            "project_id:%(project_id",
            ":x",
            "@ or or @",
        ] {
            assert!(parse_rule(bad).is_err(), "{bad:?} should not parse");
        }
        let deep = format!("{}@{}", "(".repeat(1000), ")".repeat(1000));
        assert!(parse_rule(&deep).is_err());
        assert!(parse_rule(&"not ".repeat(10_000)).is_err());
        let ok = format!(
            "{}@{}",
            "(".repeat(MAX_NESTING - 1),
            ")".repeat(MAX_NESTING - 1)
        );
        assert!(parse_rule(&ok).is_ok());
    }

    #[test]
    fn context_is_admin_uses_the_policy() {
        let policy = Policy::defaults();
        assert!(policy.context_is_admin(&admin().creds()));
        assert!(!policy.context_is_admin(&member().creds()));
        let policy = Policy::from_yaml_overrides("context_is_admin: role:cloud-admin\n").unwrap();
        assert!(!policy.context_is_admin(&admin().creds()));
    }

    #[test]
    fn policy_is_shareable() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<Policy>();
    }

    mod proptests {
        use super::*;
        use proptest::prelude::*;

        fn words() -> impl Strategy<Value = String> {
            let word = prop::sample::select(vec![
                "(",
                ")",
                "and",
                "or",
                "not",
                "@",
                "!",
                "role:admin",
                "rule:context_is_admin",
                "rule:t",
                "project_id:%(project_id)s",
                "'x':%(user_id)s",
                "is_admin:True",
                "%",
                "'",
                "\"",
                ":",
                "(role:member",
                "role:reader)",
                "http:x",
                "OR",
                "Not",
            ]);
            prop::collection::vec(word, 0..40).prop_map(|w| w.join(" "))
        }

        proptest! {
            #[test]
            fn parse_never_panics(s in any::<String>()) {
                let _ = parse_rule(&s);
            }

            #[test]
            fn token_soup_parses_and_evaluates_without_panic(s in words()) {
                if parse_rule(&s).is_ok() {
                    let yaml = format!("t: {}\n", serde_json::to_string(&s).unwrap_or_default());
                    let policy = Policy::from_yaml_overrides(&yaml);
                    if let Ok(policy) = policy {
                        let m = member();
                        prop_assert!(policy.enforce("t", &m.creds(), &target()).is_ok());
                    }
                }
            }

            #[test]
            fn file_loading_never_panics(s in any::<String>()) {
                let _ = Policy::from_yaml_overrides(&s);
            }

            #[test]
            fn yamlish_files_never_panic(lines in prop::collection::vec(
                (prop::sample::select(vec!["a", "'b'", "\"c:d\"", "- x", "{", "}", "  e", "#"]),
                 prop::sample::select(vec![": ", ":", " ", ": '", ": \"", ","]),
                 "[ -~]{0,12}"), 0..8)) {
                let text: String = lines.iter().map(|(k, sep, v)| format!("{k}{sep}{v}\n")).collect();
                let _ = Policy::from_yaml_overrides(&text);
            }
        }
    }
}
