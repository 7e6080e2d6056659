//! Tests of the patch format: the reference's examples and error texts, and properties over random patches
//! and random edits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn files(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries.iter().map(|(p, c)| ((*p).to_owned(), (*c).to_owned())).collect()
}

/// Apply `text` to `files` as a caller would: parse, apply, perform the operations.
fn run(text: &str, files: &mut BTreeMap<String, String>) -> Result<String, String> {
    let patch = parse_patch(text).map_err(|e| e.to_string())?;
    let outcome = apply_patch(&patch, |path| {
        files.get(path).cloned().ok_or_else(|| "No such file or directory (os error 2)".to_owned())
    })
    .map_err(|e| e.to_string())?;
    for op in &outcome.ops {
        match op {
            FileOp::Write { path, contents } => {
                files.insert(path.clone(), contents.clone());
            }
            FileOp::Remove { path, .. } => {
                files.remove(path);
            }
        }
    }
    Ok(outcome.summary())
}

#[test]
fn add_update_delete_and_move() {
    let mut fs = files(&[("a.py", "def f():\n    pass\n"), ("old.txt", "x\n"), ("gone.txt", "bye\n")]);
    let summary = run(
        "*** Begin Patch\n*** Add File: new/b.txt\n+one\n+two\n*** Update File: a.py\n@@ def f():\n-    pass\n\
         +    return 1\n*** Update File: old.txt\n*** Move to: moved.txt\n@@\n-x\n+y\n*** Delete File: gone.txt\n\
         *** End Patch",
        &mut fs,
    )
    .unwrap();
    assert_eq!(
        summary,
        "Success. Updated the following files:\nA new/b.txt\nM a.py\nM moved.txt\nD gone.txt\n"
    );
    assert_eq!(
        fs,
        files(&[("a.py", "def f():\n    return 1\n"), ("moved.txt", "y\n"), ("new/b.txt", "one\ntwo\n")])
    );
}

#[test]
fn context_lines_place_a_change_and_trailing_whitespace_is_forgiven() {
    let mut fs = files(&[("m.txt", "foo\nbar\nbaz\nqux\nbar  \n")]);
    run("*** Begin Patch\n*** Update File: m.txt\n@@ baz\n qux\n-bar\n+BAR\n*** End Patch", &mut fs).unwrap();
    assert_eq!(fs["m.txt"], "foo\nbar\nbaz\nqux\nBAR\n");
}

#[test]
fn end_of_file_and_pure_additions() {
    let mut fs = files(&[("e.txt", "a\nb\na\n")]);
    run("*** Begin Patch\n*** Update File: e.txt\n@@\n-a\n+z\n*** End of File\n*** End Patch", &mut fs)
        .unwrap();
    assert_eq!(fs["e.txt"], "a\nb\nz\n");
    run("*** Begin Patch\n*** Update File: e.txt\n@@\n+tail\n*** End Patch", &mut fs).unwrap();
    assert_eq!(fs["e.txt"], "a\nb\nz\ntail\n");
}

#[test]
fn failures_have_the_reference_texts() {
    let mut fs = files(&[("f.txt", "one\ntwo\n")]);
    let cases = [
        ("bad", "Invalid patch: The first line of the patch must be '*** Begin Patch'"),
        ("*** Begin Patch\nbad", "Invalid patch: The last line of the patch must be '*** End Patch'"),
        (
            "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch",
            "Invalid patch hunk on line 2: '*** Frobnicate File: x' is not a valid hunk header. Valid hunk \
             headers: '*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'",
        ),
        (
            "*** Begin Patch\n*** Update File: f.txt\n*** End Patch",
            "Invalid patch hunk on line 2: Update file hunk for path 'f.txt' is empty",
        ),
        ("*** Begin Patch\n*** End Patch", "No files were modified."),
        (
            "*** Begin Patch\n*** Update File: f.txt\n@@\n-three\n+3\n*** End Patch",
            "Failed to find expected lines in f.txt:\nthree",
        ),
        (
            "*** Begin Patch\n*** Update File: f.txt\n@@ nowhere\n-one\n+1\n*** End Patch",
            "Failed to find context 'nowhere' in f.txt",
        ),
        (
            "*** Begin Patch\n*** Update File: missing.txt\n@@\n-a\n+b\n*** End Patch",
            "Failed to read file to update missing.txt: No such file or directory (os error 2)",
        ),
        ("*** Begin Patch\n*** Delete File: missing.txt\n*** End Patch", "Failed to delete file missing.txt"),
        (
            "*** Begin Patch\n*** Update File: f.txt\n@@\n-one\n+1\n@@\nplain\n*** End Patch",
            "Invalid patch hunk on line 7: Unexpected line found in update hunk: 'plain'. Every line should \
             start with ' ' (context line), '+' (added line), or '-' (removed line)",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(run(text, &mut fs).unwrap_err(), expected, "{text:?}");
    }
    assert_eq!(fs, files(&[("f.txt", "one\ntwo\n")]), "a failed patch changes nothing");
}

#[test]
fn a_failing_hunk_applies_nothing_of_the_patch() {
    let mut fs = files(&[("f.txt", "one\n")]);
    let text =
        "*** Begin Patch\n*** Add File: new.txt\n+x\n*** Update File: f.txt\n@@\n-zzz\n+y\n*** End Patch";
    assert!(run(text, &mut fs).is_err());
    assert_eq!(fs, files(&[("f.txt", "one\n")]));
}

#[test]
fn later_hunks_see_earlier_ones() {
    let mut fs = BTreeMap::new();
    run(
        "*** Begin Patch\n*** Add File: n.txt\n+a\n*** Update File: n.txt\n@@\n-a\n+b\n*** End Patch",
        &mut fs,
    )
    .unwrap();
    assert_eq!(fs["n.txt"], "b\n");
}

#[test]
fn lenient_parsing() {
    let inner = "*** Begin Patch\n*** Add File: foo\n+hi\n*** End Patch";
    let expected = Patch { hunks: vec![Hunk::Add { path: "foo".into(), contents: "hi\n".into() }] };
    for text in [
        inner.to_owned(),
        format!("<<'EOF'\n{inner}\nEOF\n"),
        format!("<<EOF\n{inner}\nEOF"),
        "  *** Begin Patch  \n*** Add File: foo  \n+hi\n  *** End Patch  \n\n".to_owned(),
        inner.replace('\n', "\r\n"),
    ] {
        assert_eq!(parse_patch(&text), Ok(expected.clone()), "{text:?}");
    }
    let first_without_context =
        parse_patch("*** Begin Patch\n*** Update File: f\n import foo\n+bar\n*** End Patch").unwrap();
    assert_eq!(
        first_without_context.hunks,
        vec![Hunk::Update {
            path: "f".into(),
            move_to: None,
            chunks: vec![UpdateChunk {
                context: None,
                old_lines: vec!["import foo".into()],
                new_lines: vec!["import foo".into(), "bar".into()],
                end_of_file: false,
            }],
        }]
    );
}

#[test]
fn a_script_that_calls_apply_patch_among_other_commands_is_told_apart() {
    let patch = "*** Begin Patch\n*** Add File: foo\n+hi\n*** End Patch";
    for script in [
        format!("echo x && apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("apply_patch <<'EOF'\n{patch}\nEOF\ngit diff"),
        format!("cd $HOME && apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("if true; then apply_patch '{patch}'; fi"),
        format!("(cd x && applypatch <<EOF\n{patch}\nEOF\n)"),
        "ls | apply_patch".to_owned(),
    ] {
        let with_patch = if script.contains("Begin Patch") { script } else { format!("{script} # {patch}") };
        assert!(calls_apply_patch(&with_patch), "{with_patch:?}");
        assert_eq!(shell_invocation(&with_patch), None, "{with_patch:?}");
    }
    for script in [
        "echo apply_patch".to_owned(),
        format!("cat > notes <<'EOF'\n{patch}\nEOF"),
        format!("apply_patchy '{patch}'"),
        format!("git apply_patch '{patch}'"),
        "apply_patch".to_owned(),
    ] {
        assert!(!calls_apply_patch(&script), "{script:?}");
    }
}

#[test]
fn shell_forms_are_recognised() {
    let patch = "*** Begin Patch\n*** Add File: foo\n+hi\n*** End Patch";
    let found = |script: &str| shell_invocation(script);
    let expect = |workdir: Option<&str>| {
        Some(PatchInvocation { patch: patch.to_owned(), workdir: workdir.map(str::to_owned) })
    };
    assert_eq!(found(&format!("apply_patch <<'EOF'\n{patch}\nEOF\n")), expect(None));
    assert_eq!(found(&format!("apply_patch <<EOF\n{patch}\nEOF")), expect(None));
    assert_eq!(found(&format!("applypatch <<\"PATCH\"\n{patch}\nPATCH\n")), expect(None));
    assert_eq!(found(&format!("apply_patch<<'EOF'\n{patch}\nEOF")), expect(None));
    assert_eq!(
        found(&format!("apply_patch <<-'EOF'\n\t{}\n\tEOF", patch.replace('\n', "\n\t"))),
        expect(None)
    );
    assert_eq!(found(&format!("cd sub/dir && apply_patch <<'EOF'\n{patch}\nEOF")), expect(Some("sub/dir")));
    assert_eq!(found(&format!("cd 'a b' && apply_patch <<'EOF'\n{patch}\nEOF")), expect(Some("a b")));
    assert_eq!(found(&format!("cd \"a b\" && apply_patch <<'EOF'\n{patch}\nEOF")), expect(Some("a b")));
    assert_eq!(found(&format!("apply_patch '{patch}'")), expect(None));
    assert_eq!(found(&format!("apply_patch \"{patch}\"\n")), expect(None));
    // The preludes models send: `cd` and `set` commands before the call, with `&&`, `;` or a newline.
    assert_eq!(found(&format!("cd foo; apply_patch <<'EOF'\n{patch}\nEOF")), expect(Some("foo")));
    assert_eq!(found(&format!("cd foo\napply_patch <<'EOF'\n{patch}\nEOF")), expect(Some("foo")));
    assert_eq!(found(&format!("set -e; cd foo && apply_patch <<'EOF'\n{patch}\nEOF")), expect(Some("foo")));
    assert_eq!(found(&format!("set -euo pipefail\napply_patch <<'EOF'\n{patch}\nEOF")), expect(None));
    assert_eq!(found(&format!("cd a && cd 'b c'; apply_patch '{patch}'")), expect(Some("a/b c")));
    assert_eq!(found(&format!("cd a; cd /abs && apply_patch '{patch}'")), expect(Some("/abs")));
    for not in [
        format!("set -e x; apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("set $X; apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("cd foo & apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("cd foo || apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("cd foo bar && apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("cd $HOME && apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("echo x && apply_patch <<'EOF'\n{patch}\nEOF"),
        format!("apply_patch <<'EOF'\n{patch}\nEOF\necho done"),
        format!("apply_patch foo <<'EOF'\n{patch}\nEOF"),
        format!("apply_patchy <<'EOF'\n{patch}\nEOF"),
        format!("apply_patch <<'EOF'\n{patch}\n"),
        "apply_patch \"$(cat p)\"".to_owned(),
        "apply_patch".to_owned(),
        "ls -l".to_owned(),
    ] {
        assert_eq!(found(&not), None, "{not:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------

fn line() -> impl Strategy<Value = String> {
    // Any text but line breaks (which cannot be inside a line), starting with anything, markers included.
    prop_oneof![
        "[^\r\n]{0,12}",
        Just("*** End Patch".to_owned()),
        Just("@@".to_owned()),
        Just(String::new()),
        Just("+-* ".to_owned()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    "[a-z0-9_]{1,8}(/[a-z0-9_.-]{1,8}){0,2}"
}

fn chunk() -> impl Strategy<Value = UpdateChunk> {
    (
        prop::option::of("[^\r\n]{0,10}"),
        prop::collection::vec(line(), 0..4),
        prop::collection::vec(line(), 0..4),
        any::<bool>(),
    )
        .prop_filter("a chunk has lines", |(_, old, new, _)| !old.is_empty() || !new.is_empty())
        .prop_map(|(context, old_lines, new_lines, end_of_file)| UpdateChunk {
            context,
            old_lines,
            new_lines,
            end_of_file,
        })
}

fn hunk() -> impl Strategy<Value = Hunk> {
    prop_oneof![
        (path(), prop::collection::vec(line(), 0..4)).prop_map(|(path, lines)| Hunk::Add {
            path,
            contents: lines.iter().map(|l| format!("{l}\n")).collect(),
        }),
        path().prop_map(|path| Hunk::Delete { path }),
        (path(), prop::option::of(path()), prop::collection::vec(chunk(), 1..4))
            .prop_map(|(path, move_to, chunks)| Hunk::Update { path, move_to, chunks }),
    ]
}

/// A line-level diff of `old` into `new` (longest common subsequence): `(kind, line)` with kind ' ', '-', '+'.
fn diff(old: &[String], new: &[String]) -> Vec<(char, String)> {
    let (n, m) = (old.len(), new.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] =
                if old[i] == new[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            out.push((' ', old[i].clone()));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(('+', new[j].clone()));
            j += 1;
        } else {
            out.push(('-', old[i].clone()));
            i += 1;
        }
    }
    out
}

/// The update chunks of a diff, each change with up to `context` unchanged lines around it.
fn chunks_of(diff: &[(char, String)], context: usize) -> Vec<UpdateChunk> {
    let changed: Vec<usize> =
        diff.iter().enumerate().filter(|(_, (k, _))| *k != ' ').map(|(i, _)| i).collect();
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        let (start, end) = (i.saturating_sub(context), (i + context + 1).min(diff.len()));
        match groups.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => groups.push((start, end)),
        }
    }
    groups
        .into_iter()
        .map(|(start, end)| {
            let mut chunk = UpdateChunk::default();
            for (kind, text) in &diff[start..end] {
                if *kind != '+' {
                    chunk.old_lines.push(text.clone());
                }
                if *kind != '-' {
                    chunk.new_lines.push(text.clone());
                }
            }
            chunk
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn rendered_patches_parse_back(hunks in prop::collection::vec(hunk(), 0..5)) {
        let patch = Patch { hunks };
        prop_assert_eq!(parse_patch(&render_patch(&patch)), Ok(patch));
    }

    /// An update made from a diff of two texts turns the first into the second. Lines are unique within a
    /// text (as in code, where a change is placed by lines that occur once), drawn from a shared pool so
    /// that the texts have lines in common.
    #[test]
    fn a_diff_applied_as_a_patch_gives_the_target(
        old in prop::collection::btree_set(0u16..60, 0..25).prop_map(|s| s.into_iter().collect::<Vec<_>>()).prop_shuffle(),
        new in prop::collection::btree_set(0u16..60, 0..25).prop_map(|s| s.into_iter().collect::<Vec<_>>()).prop_shuffle(),
        context in 0usize..4,
    ) {
        let old: Vec<String> = old.into_iter().map(|n| format!("line {n}")).collect();
        let new: Vec<String> = new.into_iter().map(|n| format!("line {n}")).collect();
        let original: String = old.iter().map(|l| format!("{l}\n")).collect();
        let target: String = new.iter().map(|l| format!("{l}\n")).collect();
        let chunks = chunks_of(&diff(&old, &new), context.max(1));
        let mut fs = files(&[("t.txt", &original)]);
        if chunks.is_empty() {
            prop_assert_eq!(original, target);
        } else {
            let patch = Patch { hunks: vec![Hunk::Update { path: "t.txt".into(), move_to: None, chunks }] };
            let text = render_patch(&patch);
            prop_assert_eq!(run(&text, &mut fs), Ok("Success. Updated the following files:\nM t.txt\n".to_owned()));
            prop_assert_eq!(&fs["t.txt"], &target, "{}", text);
        }
    }

    /// Whatever the patch, the applier never panics and either succeeds or names a failure.
    #[test]
    fn any_patch_applies_or_fails_cleanly(hunks in prop::collection::vec(hunk(), 0..4), content in "[a-c\n]{0,30}") {
        let patch = Patch { hunks };
        let _ = apply_patch(&patch, |_| Ok(content.clone()));
    }
}
