//! The `uexec` binary: the composition root (not yet built: see issue 7).

fn main() -> anyhow::Result<()> {
    anyhow::bail!(
        "uexec is not built yet: the MCP server and `uexec run` arrive with the app issue; \
         the library crates (uexec-domain, uexec-ports) are usable today"
    )
}
