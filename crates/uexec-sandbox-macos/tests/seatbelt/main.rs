//! Integration tests of the Seatbelt profile generator and adapter (one binary, modules by theme). They run on
//! any Unix host: nothing here needs macOS.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod adapter;
mod canonical;
mod fake_fs;
mod golden;
mod planted;
mod props;
mod sexpr;

use uexec_sandbox_macos::SeatbeltLaunch;

/// Structural checks every generated profile must pass: it reads as balanced s-expressions, opens with
/// `(version 1)` and `(deny default)`, has only `allow`/`deny` rules after that, and references exactly its
/// parameters, each once, in command-line order. Returns the parsed forms.
pub fn check_profile(launch: &SeatbeltLaunch) -> Vec<sexpr::Sexp> {
    use sexpr::Sexp;
    let forms = sexpr::parse(&launch.profile).unwrap_or_else(|err| panic!("profile does not parse: {err}"));
    assert_eq!(forms[0], Sexp::List(vec![Sexp::Atom("version".into()), Sexp::Atom("1".into())]));
    assert_eq!(forms[1], Sexp::List(vec![Sexp::Atom("deny".into()), Sexp::Atom("default".into())]));
    for form in &forms[1..] {
        let Sexp::List(items) = form else { panic!("top-level atom {form:?}") };
        assert!(
            matches!(items.first(), Some(Sexp::Atom(head)) if head == "allow" || head == "deny"),
            "unexpected top-level form {form:?}"
        );
    }
    let names: Vec<String> = launch.params.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(sexpr::param_references(&forms), names);
    forms
}
