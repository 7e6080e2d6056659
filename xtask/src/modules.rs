//! The module check: inside every crate of the workspace, the files' modules form no cycle.
//!
//! A module depends on another when its code names it by path: `crate::a::b`, `super::x`, `self::y` (in `use`
//! trees too: `use crate::{a::X, b::{c, Y}}`), or one of its own submodules by name (`child::f()`). A path
//! counts toward the deepest module that has its own file (`crate::sys::clone::spawn` toward
//! `sys/clone.rs`, `crate::table::platform::x` toward `table.rs`). Not counted: comments and string literals;
//! test code (`#[cfg(test)]` items and the files they declare), which may use any module; the crate root
//! (`lib.rs`, `main.rs`: it declares and re-exports everything); and a submodule's uses of its own ancestors
//! (`super::`: a submodule is a part of its parent, which may use it in turn). Every other cycle of modules
//! is reported with one use per edge, as `file:line`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

/// A module: its path from the crate root (`[]` is the root), e.g. `["sys", "clone"]`.
type ModPath = Vec<String>;

/// The source directories of the workspace's library and binary targets, from `cargo metadata`, each with the
/// package's name.
pub(crate) fn source_dirs(metadata: &Value) -> Result<Vec<(String, PathBuf)>> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no `packages` array")?;
    let mut dirs: Vec<(String, PathBuf)> = Vec::new();
    for package in packages {
        let name = package["name"].as_str().context("package without a name")?;
        for target in package["targets"].as_array().into_iter().flatten() {
            let kinds: Vec<&str> =
                target["kind"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if !kinds.iter().any(|k| matches!(*k, "lib" | "rlib" | "proc-macro" | "bin")) {
                continue;
            }
            let Some(dir) = target["src_path"].as_str().map(Path::new).and_then(Path::parent) else {
                continue;
            };
            if !dirs.iter().any(|(_, d)| d == dir) {
                dirs.push((name.to_owned(), dir.to_path_buf()));
            }
        }
    }
    Ok(dirs)
}

/// Every module cycle of the crate whose sources lie in `dir`, one line per cycle.
pub(crate) fn cycles_in(dir: &Path) -> Result<Vec<String>> {
    let mut files = Vec::new();
    collect_rs(dir, &mut files)?;
    let mut modules: BTreeMap<ModPath, (PathBuf, String)> = BTreeMap::new();
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    for file in files {
        let text = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let module = module_path(dir, &file);
        let (code, test_children) = without_tests(&strip_comments_and_strings(&text));
        for child in test_children {
            let mut path = module.clone();
            path.push(child);
            test_only.insert(path);
        }
        modules.insert(module, (file, code));
    }
    // Test-only files and everything beneath them.
    modules.retain(|path, _| !test_only.iter().any(|t| path.starts_with(t)));

    let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, usize>> = BTreeMap::new();
    for (from, (_, code)) in &modules {
        if from.is_empty() {
            continue;
        }
        for (line, path) in paths_named(from, code) {
            let Some(to) =
                (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains_key(p))
            else {
                continue;
            };
            if to == *from || from.starts_with(&to) {
                continue;
            }
            edges.entry(from.clone()).or_default().entry(to).or_insert(line);
        }
    }

    let mut report = Vec::new();
    for cycle in strongly_connected(&modules.keys().cloned().collect::<Vec<_>>(), &edges) {
        let mut uses = Vec::new();
        for from in &cycle {
            for (to, line) in edges.get(from).into_iter().flatten() {
                if cycle.contains(to) {
                    let file =
                        modules[from].0.strip_prefix(dir).unwrap_or(&modules[from].0).display().to_string();
                    uses.push(format!("{} -> {} ({file}:{line})", show(from), show(to)));
                }
            }
        }
        report.push(format!("modules in a cycle: {}", uses.join(", ")));
    }
    Ok(report)
}

fn show(path: &ModPath) -> String {
    path.join("::")
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

/// `src/sys/clone.rs` -> `sys::clone`, `src/sys/mod.rs` -> `sys`, `src/lib.rs` -> the root.
fn module_path(dir: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(dir).unwrap_or(file).with_extension("");
    let mut path: ModPath = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    if path.len() == 1 && (path[0] == "lib" || path[0] == "main") {
        path.clear();
    }
    path
}

/// `text` with comments, string literals and character literals replaced by spaces (line breaks kept).
pub(crate) fn strip_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &chars[i..j.min(chars.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), or a lifetime ('a), which stays.
            let end = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&j| chars[j] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for _ in i..=end {
                        out.push(' ');
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// `code` without its `#[cfg(test)]` items (blanked, line breaks kept), and the names of the modules declared
/// by such an item in a file of their own (`#[cfg(test)] mod tests;`).
pub(crate) fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut out: Vec<char> = code.chars().collect();
    let chars = out.clone();
    let mut test_children = Vec::new();
    let text: String = chars.iter().collect();
    let mut search = 0;
    while let Some(found) = text[search..].find(MARK) {
        let start_byte = search + found;
        let start = text[..start_byte].chars().count();
        let mut i = start + MARK.chars().count();
        // Further attributes, then the item up to its `;` or its balanced `{ ... }`.
        let mut depth = 0usize;
        let mut brackets = 0usize;
        let mut item = String::new();
        while i < chars.len() {
            let c = chars[i];
            match c {
                '[' => brackets += 1,
                ']' => brackets = brackets.saturating_sub(1),
                '{' if brackets == 0 => depth += 1,
                '}' if brackets == 0 => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                ';' if depth == 0 && brackets == 0 => {
                    i += 1;
                    let words: Vec<&str> = item.split_whitespace().collect();
                    if let Some(at) = words.iter().position(|w| *w == "mod")
                        && let Some(name) = words.get(at + 1)
                    {
                        test_children.push((*name).to_owned());
                    }
                    break;
                }
                _ => {}
            }
            if brackets == 0 && depth == 0 && c != ']' {
                item.push(c);
            }
            i += 1;
        }
        for slot in out.iter_mut().take(i.min(chars.len())).skip(start) {
            if *slot != '\n' {
                *slot = ' ';
            }
        }
        search = text.char_indices().nth(i).map_or(text.len(), |(b, _)| b);
    }
    (out.into_iter().collect(), test_children)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((line, Token::Ident(chars[start..i].iter().collect())));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((line, Token::PathSep));
            i += 2;
        } else {
            out.push((
                line,
                match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    ',' => Token::Comma,
                    _ => Token::Other,
                },
            ));
            i += 1;
        }
    }
    out
}

/// Every module path `code` (the code of module `from`) names, with its line: each path starting with `crate`,
/// `super` or `self`, or with one of the module's own submodules (`mod name;` in `code`), expanded over `use`
/// trees.
fn paths_named(from: &ModPath, code: &str) -> Vec<(usize, ModPath)> {
    let toks = tokens(code);
    let mut children = BTreeSet::new();
    for pair in toks.windows(3) {
        if let [(_, Token::Ident(m)), (_, Token::Ident(name)), (_, Token::Other)] = pair
            && m == "mod"
        {
            children.insert(name.clone());
        }
    }
    let mut out = Vec::new();
    for (i, (line, token)) in toks.iter().enumerate() {
        let Token::Ident(first) = token else { continue };
        if i > 0 && toks[i - 1].1 == Token::PathSep {
            continue;
        }
        if toks.get(i + 1).map(|t| &t.1) != Some(&Token::PathSep) {
            continue;
        }
        let base: ModPath = match first.as_str() {
            "crate" => Vec::new(),
            "self" => from.clone(),
            "super" => from[..from.len().saturating_sub(1)].to_vec(),
            name if children.contains(name) => {
                let mut base = from.clone();
                base.push(name.to_owned());
                base
            }
            _ => continue,
        };
        let mut paths = Vec::new();
        expand(&toks, i + 2, base, &mut paths);
        out.extend(paths.into_iter().map(|p| (*line, p)));
    }
    out
}

/// The paths of the `use` tree (or plain path) starting at `toks[at]`, each prefixed with `prefix`.
fn expand(toks: &[(usize, Token)], mut at: usize, mut prefix: ModPath, out: &mut Vec<ModPath>) -> usize {
    loop {
        match toks.get(at).map(|t| &t.1) {
            Some(Token::Ident(segment)) => {
                match segment.as_str() {
                    "super" => {
                        prefix.pop();
                    }
                    "self" => {}
                    _ => prefix.push(segment.clone()),
                }
                at += 1;
                if toks.get(at).map(|t| &t.1) == Some(&Token::PathSep) {
                    at += 1;
                    continue;
                }
                out.push(prefix);
                return at;
            }
            Some(Token::Open) => {
                at += 1;
                loop {
                    match toks.get(at).map(|t| &t.1) {
                        None => return at,
                        Some(Token::Close) => return at + 1,
                        Some(Token::Comma) => at += 1,
                        Some(_) => {
                            let before = at;
                            at = expand(toks, at, prefix.clone(), out);
                            // Skip what follows an element (`as name`, `*`) up to its comma or the group's end.
                            while let Some(t) = toks.get(at).map(|t| &t.1) {
                                if matches!(t, Token::Comma | Token::Close) {
                                    break;
                                }
                                at += 1;
                            }
                            if at == before {
                                at += 1;
                            }
                        }
                    }
                }
            }
            _ => {
                out.push(prefix);
                return at;
            }
        }
    }
}

/// The strongly connected components of more than one node (Tarjan), each sorted.
fn strongly_connected(
    nodes: &[ModPath],
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, usize>>,
) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeMap<ModPath, usize>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    fn visit(v: &ModPath, s: &mut State<'_>) {
        let n = s.index.len();
        s.index.insert(v.clone(), n);
        s.low.insert(v.clone(), n);
        s.stack.push(v.clone());
        let targets: Vec<ModPath> = s.edges.get(v).map(|m| m.keys().cloned().collect()).unwrap_or_default();
        for w in targets {
            if !s.index.contains_key(&w) {
                visit(&w, s);
                let low = s.low[v].min(s.low[&w]);
                s.low.insert(v.clone(), low);
            } else if s.stack.contains(&w) {
                let low = s.low[v].min(s.index[&w]);
                s.low.insert(v.clone(), low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                let done = w == *v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state =
        State { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for node in nodes {
        if !state.index.contains_key(node) {
            visit(node, &mut state);
        }
    }
    state.found
}

/// Every module cycle of every crate of the workspace, as `package: cycle` lines.
pub(crate) fn check(metadata: &Value) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for (package, dir) in source_dirs(metadata)? {
        for cycle in cycles_in(&dir)? {
            problems.push(format!("{package}: {cycle}"));
        }
    }
    Ok(problems)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The cycles of a crate made of `files` (path under `src/`, contents).
    fn cycles(files: &[(&str, &str)]) -> Vec<String> {
        let dir = tempdir(files);
        let found = cycles_in(&dir.join("src")).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        found
    }

    fn tempdir(files: &[(&str, &str)]) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "xtask-modules-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        for (path, text) in files {
            let path = dir.join("src").join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_two_file_circle_is_reported_with_its_uses() {
        let found = cycles(&[
            ("lib.rs", "mod reap;\nmod tree;\n"),
            ("reap.rs", "//! Reaping.\nuse crate::tree::Member;\n"),
            ("tree.rs", "//! Trees.\n\nfn f() { crate::reap::reap_orphan(1); }\n"),
        ]);
        assert_eq!(found, ["modules in a cycle: reap -> tree (reap.rs:2), tree -> reap (tree.rs:3)"]);
    }

    #[test]
    fn use_trees_nested_modules_and_longer_circles_count() {
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\nmod sys;\n"),
            ("a.rs", "use crate::{b::{self, X}, other};\n"),
            ("b.rs", "use crate::sys::clone::spawn as s;\n"),
            ("sys/mod.rs", "mod clone;\n"),
            ("sys/clone.rs", "fn g() { super::super::a::h() }\n"),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        for edge in ["a -> b", "b -> sys::clone", "sys::clone -> a"] {
            assert!(found[0].contains(edge), "{edge} in {found:?}");
        }
    }

    #[test]
    fn a_dag_passes_and_what_is_not_a_dependency_is_not_counted() {
        // Parent and child use each other (a submodule is a part of its parent); the other direction is named
        // only in comments, a string, a character literal next to a lifetime, and test code.
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\nmod sys;\n"),
            ("sys/mod.rs", "mod clone;\nstruct Plan;\nfn f() { clone::spawn() }\n"),
            ("sys/clone.rs", "use super::Plan;\nuse crate::sys::Plan as P;\n"),
            ("a.rs", "use crate::b::X;\nfn f<'a>(x: &'a str) -> char { 'b' }\n"),
            (
                "b.rs",
                "//! Uses crate::a::Y in prose.\n/* crate::a::Z */\nconst S: &str = \"crate::a::W\";\n\
                 const R: &str = r#\"crate::a::V\"#;\n#[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n    \
                 use crate::a::T;\n}\n#[cfg(test)]\nmod more;\n",
            ),
            ("b/more.rs", "use crate::a::U;\n"),
        ]);
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn the_workspace_has_no_module_cycle() {
        let root = crate::workspace_root().unwrap();
        let problems = check(&crate::metadata(&root).unwrap()).unwrap();
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
