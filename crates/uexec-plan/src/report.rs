//! The file-system half of the protection report, in the same words on every platform: what the plan left
//! out of the writable roots and of the protected entries, and why. Each adapter adds what its mechanism says.

use std::path::PathBuf;

/// The report's words for the roots the plan did not grant as given (`crate::RootsPlan`: missing, refused) and
/// the repositories it granted to linked worktrees (`crate::GitPlan::grants`), each in parentheses; empty when
/// there are none.
pub fn roots_text(missing: &[PathBuf], refused: &[PathBuf], grants: &[(PathBuf, PathBuf)]) -> String {
    let mut text = String::new();
    if !missing.is_empty() {
        text.push_str(&format!(" (missing roots skipped: {})", paths(missing)));
    }
    if !refused.is_empty() {
        text.push_str(&format!(
            " (roots refused, their path goes through a symlink inside a writable root: {})",
            paths(refused)
        ));
    }
    for (repository, worktree) in grants {
        text.push_str(&format!(" ({})", uexec_domain::gitdir::worktree_grant_text(repository, worktree)));
    }
    text
}

/// The report's words for the protected entries' exceptions: the directories that take no new entry, the
/// entries absent and so not protected, and what a protected entry named but is not protected, and why (the
/// plan's notes), each in parentheses; empty when there are none.
pub fn entries_text(closed: &[PathBuf], absent: &[PathBuf], notes: &[String]) -> String {
    let mut text = String::new();
    if !closed.is_empty() {
        text.push_str(&format!(" (no new entry in: {})", paths(closed)));
    }
    if !absent.is_empty() {
        text.push_str(&format!(" (absent, so not protected: {})", paths(absent)));
    }
    if !notes.is_empty() {
        text.push_str(&format!(" (not followed: {})", notes.join("; ")));
    }
    text
}

/// The paths of `list`, comma-separated.
fn paths(list: &[PathBuf]) -> String {
    list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn each_exception_is_said_and_none_says_nothing() {
        assert_eq!(roots_text(&[], &[], &[]), "");
        assert_eq!(entries_text(&[], &[], &[]), "");
        let roots = roots_text(&["/gone".into()], &["/w/tmp".into()], &[("/r/.git".into(), "/wt".into())]);
        assert!(roots.starts_with(" (missing roots skipped: /gone) (roots refused, "), "{roots}");
        assert!(roots.contains("/r/.git") && roots.contains("/wt"), "{roots}");
        let entries = entries_text(
            &["/w/.git/modules".into()],
            &["/w/.uexec".into(), "/w/.git".into()],
            &["x".into(), "y".into()],
        );
        assert_eq!(
            entries,
            " (no new entry in: /w/.git/modules) (absent, so not protected: /w/.uexec, /w/.git) (not followed: x; y)"
        );
    }
}
