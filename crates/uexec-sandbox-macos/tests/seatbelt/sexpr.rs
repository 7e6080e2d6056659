//! A small SBPL reader (s-expressions with strings, `#"regex"` literals and `;` comments) and an evaluator for
//! the file rules of a profile, so tests can check what a generated profile actually allows.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One datum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sexp {
    /// A symbol or number: `allow`, `file-write*`, `1`.
    Atom(String),
    /// A string literal, escapes decoded.
    Str(String),
    /// A `#"..."` regex literal, as written.
    Regex(String),
    /// A parenthesised list.
    List(Vec<Sexp>),
}

/// Reads every top-level datum of `text`. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<Sexp>, String> {
    let bytes: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let mut line = 1;
    let mut stack: Vec<(usize, Vec<Sexp>)> = Vec::new();
    let mut top = Vec::new();
    while pos < bytes.len() {
        let c = bytes[pos];
        let datum = match c {
            '\n' => {
                line += 1;
                pos += 1;
                continue;
            }
            c if c.is_whitespace() => {
                pos += 1;
                continue;
            }
            ';' => {
                while pos < bytes.len() && bytes[pos] != '\n' {
                    pos += 1;
                }
                continue;
            }
            '(' => {
                stack.push((line, Vec::new()));
                pos += 1;
                continue;
            }
            ')' => {
                pos += 1;
                let Some((_, items)) = stack.pop() else {
                    return Err(format!("line {line}: unbalanced ')'"));
                };
                Sexp::List(items)
            }
            '"' => {
                let (s, next, lines) = read_string(&bytes, pos + 1, line)?;
                pos = next;
                line += lines;
                Sexp::Str(s)
            }
            '#' if bytes.get(pos + 1) == Some(&'"') => {
                let (s, next, lines) = read_string(&bytes, pos + 2, line)?;
                pos = next;
                line += lines;
                Sexp::Regex(s)
            }
            _ => {
                let start = pos;
                while pos < bytes.len() && !bytes[pos].is_whitespace() && !"()\";".contains(bytes[pos]) {
                    pos += 1;
                }
                Sexp::Atom(bytes[start..pos].iter().collect())
            }
        };
        match stack.last_mut() {
            Some((_, items)) => items.push(datum),
            None => top.push(datum),
        }
    }
    if let Some((opened, _)) = stack.last() {
        return Err(format!("line {opened}: '(' never closed"));
    }
    Ok(top)
}

/// Reads a string body starting after its opening quote: returns the decoded text, the position after the
/// closing quote and how many newlines it spanned.
fn read_string(chars: &[char], mut pos: usize, line: usize) -> Result<(String, usize, usize), String> {
    let mut out = String::new();
    let mut lines = 0;
    loop {
        let Some(&c) = chars.get(pos) else {
            return Err(format!("line {line}: unterminated string"));
        };
        pos += 1;
        match c {
            '"' => return Ok((out, pos, lines)),
            '\\' => {
                let Some(&escaped) = chars.get(pos) else {
                    return Err(format!("line {line}: unterminated escape"));
                };
                pos += 1;
                out.push(match escaped {
                    'n' => '\n',
                    't' => '\t',
                    '"' | '\\' => escaped,
                    other => return Err(format!("line {line}: unknown escape \\{other}")),
                });
            }
            '\n' => {
                lines += 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
}

/// Every `(param "NAME")` in `forms`, in order of appearance.
pub fn param_references(forms: &[Sexp]) -> Vec<String> {
    let mut out = Vec::new();
    for form in forms {
        if let Sexp::List(items) = form {
            if let [Sexp::Atom(head), Sexp::Str(name)] = items.as_slice()
                && head == "param"
            {
                out.push(name.clone());
            }
            out.extend(param_references(items));
        }
    }
    out
}

/// Whether the profile allows `operation` (e.g. `file-write-data`, `file-ioctl`) on `path`, given its
/// parameters. Supports what uexec's profiles use: `(deny default)` then `allow` rules with `literal`,
/// `subpath`, `regex` (of the form `^prefix[0-9]+$`), `vnode-type` (assumed to match), `require-all`,
/// `require-any` and `require-not`. Anything else in a matching rule is an error, so a profile that outgrows
/// the evaluator fails the tests instead of passing them blindly.
pub fn allows(
    forms: &[Sexp],
    operation: &str,
    path: &Path,
    params: &[(String, OsString)],
) -> Result<bool, String> {
    let mut allowed = false;
    for form in forms {
        let Sexp::List(items) = form else { return Err(format!("top-level atom {form:?}")) };
        let Some(Sexp::Atom(head)) = items.first() else { return Err(format!("form without head {form:?}")) };
        let ops: Vec<&str> = items[1..]
            .iter()
            .map_while(|item| match item {
                Sexp::Atom(op) => Some(op.as_str()),
                _ => None,
            })
            .collect();
        let filters = &items[1 + ops.len()..];
        match head.as_str() {
            "version" => {}
            "deny" if ops == ["default"] && filters.is_empty() => {}
            "deny" => {
                return Err(format!("the evaluator supports no deny rule but (deny default): {form:?}"));
            }
            "allow" => {
                if !ops.iter().any(|op| op_matches(op, operation)) {
                    continue;
                }
                if filters.is_empty() {
                    allowed = true;
                }
                for filter in filters {
                    if eval_filter(filter, path, params)? {
                        allowed = true;
                    }
                }
            }
            other => return Err(format!("unknown top-level form {other}")),
        }
    }
    Ok(allowed)
}

/// `file-write*` covers `file-write-data`; a name without `*` covers itself.
fn op_matches(rule_op: &str, operation: &str) -> bool {
    match rule_op.strip_suffix('*') {
        Some(prefix) => operation.starts_with(prefix),
        None => rule_op == operation,
    }
}

fn eval_filter(filter: &Sexp, path: &Path, params: &[(String, OsString)]) -> Result<bool, String> {
    let Sexp::List(items) = filter else { return Err(format!("filter is not a list: {filter:?}")) };
    let Some(Sexp::Atom(head)) = items.first() else { return Err(format!("filter without head {filter:?}")) };
    let args = &items[1..];
    match (head.as_str(), args) {
        ("literal", [arg]) => Ok(path == string_arg(arg, params)?.as_path()),
        ("subpath", [arg]) => Ok(path.starts_with(string_arg(arg, params)?)),
        ("regex", [Sexp::Regex(regex)]) => digits_regex_matches(regex, path),
        ("vnode-type", [Sexp::Atom(_)]) => Ok(true),
        ("require-all", _) => {
            for arg in args {
                if !eval_filter(arg, path, params)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        ("require-any", _) => {
            for arg in args {
                if eval_filter(arg, path, params)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        ("require-not", [arg]) => Ok(!eval_filter(arg, path, params)?),
        _ => Err(format!("unsupported filter {filter:?}")),
    }
}

/// A string literal, or `(param "NAME")` looked up in `params` (bytes kept as they are).
fn string_arg(arg: &Sexp, params: &[(String, OsString)]) -> Result<std::path::PathBuf, String> {
    match arg {
        Sexp::Str(s) => Ok(s.into()),
        Sexp::List(items) => match items.as_slice() {
            [Sexp::Atom(head), Sexp::Str(name)] if head == "param" => params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| Path::new(OsStr::from_bytes(v.as_bytes())).to_path_buf())
                .ok_or_else(|| format!("undefined parameter {name}")),
            _ => Err(format!("unsupported string argument {arg:?}")),
        },
        _ => Err(format!("unsupported string argument {arg:?}")),
    }
}

/// Matches regexes of the one shape the profiles use: `^<literal prefix>[0-9]+$`.
fn digits_regex_matches(regex: &str, path: &Path) -> Result<bool, String> {
    let prefix = regex
        .strip_prefix('^')
        .and_then(|r| r.strip_suffix("[0-9]+$"))
        .filter(|p| !p.contains(['[', ']', '(', ')', '*', '+', '?', '.', '\\', '|', '$', '^']))
        .ok_or_else(|| format!("unsupported regex {regex}"))?;
    let bytes = path.as_os_str().as_bytes();
    Ok(bytes
        .strip_prefix(prefix.as_bytes())
        .is_some_and(|rest| !rest.is_empty() && rest.iter().all(u8::is_ascii_digit)))
}

#[test]
fn reader_handles_strings_escapes_regexes_and_comments() {
    let forms = parse("(a \"x ) ; \\\" y\" #\"^/d[0-9]+$\") ; trailing ( comment\n(b (c))").unwrap();
    assert_eq!(
        forms,
        vec![
            Sexp::List(vec![
                Sexp::Atom("a".into()),
                Sexp::Str("x ) ; \" y".into()),
                Sexp::Regex("^/d[0-9]+$".into())
            ]),
            Sexp::List(vec![Sexp::Atom("b".into()), Sexp::List(vec![Sexp::Atom("c".into())])]),
        ]
    );
}

#[test]
fn reader_rejects_unbalanced_and_unterminated_input() {
    assert!(parse("(a (b)").unwrap_err().contains("never closed"));
    assert!(parse("(a))").unwrap_err().contains("unbalanced"));
    assert!(parse("(a \"b)").unwrap_err().contains("unterminated"));
    assert!(parse("(a \"\\q\")").unwrap_err().contains("unknown escape"));
    assert!(parse("; (only a comment").unwrap().is_empty());
}

#[test]
fn evaluator_applies_require_not_and_params() {
    let forms = parse(
        "(version 1)(deny default)(allow file-write* (require-all (subpath (param \"R\")) \
         (require-not (subpath (param \"R_RO\")))))(allow file-ioctl (regex #\"^/dev/ttys[0-9]+$\"))",
    )
    .unwrap();
    let params = vec![("R".to_owned(), OsString::from("/w")), ("R_RO".to_owned(), OsString::from("/w/.git"))];
    assert!(allows(&forms, "file-write-data", Path::new("/w/a"), &params).unwrap());
    assert!(!allows(&forms, "file-write-data", Path::new("/w/.git/config"), &params).unwrap());
    assert!(!allows(&forms, "file-write-data", Path::new("/wx"), &params).unwrap());
    assert!(!allows(&forms, "file-read-data", Path::new("/w/a"), &params).unwrap());
    assert!(allows(&forms, "file-ioctl", Path::new("/dev/ttys012"), &params).unwrap());
    assert!(!allows(&forms, "file-ioctl", Path::new("/dev/ttys"), &params).unwrap());
    assert!(allows(&forms, "file-write-data", Path::new("/w/a"), &[]).is_err());
}
