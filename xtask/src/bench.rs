//! `cargo xtask bench`: every benchmark, then one summary of the targets (met or NOT met) and the peer table.
//!
//! The benchmarks:
//! - `uexec-pty/spawn` (cargo bench): PTY spawn to exit against the `posix_spawn` floor and portable-pty, PTY
//!   throughput against a raw read loop.
//! - `uexec-sandbox-linux/spawn` (cargo bench): a sandboxed spawn against an unsandboxed one (and bubblewrap).
//! - `tests/engine_roundtrip` (cargo bench): the engine's `write_stdin` round trip against a raw PTY.
//! - `tests/login_snapshot` (cargo bench): a sandboxed `exec_command` of `true` with `login: true` (replayed
//!   from the login snapshot) against `login: false`, on a HOME whose `.bashrc` takes 100 ms.
//! - `run` (here): whole processes, measured side by side in one interleaved run on the release build:
//!   `uexec run -- /bin/true` against bubblewrap, `codex sandbox` and `srt`; and the PTY peers tmux and pexpect.
//! - `clients` (tests/clients/compare.mjs): through the Codex CLI with a scripted model, the turnaround and tokens
//!   of each tool call through uexec against the Codex CLI's own unified exec, interleaved, on the release build.
//!
//! Each benchmark prints `target: <name> = <value> (<op> <bound>)` lines and `peer-row: | ... |` lines; this
//! module collects them from the benchmarks' output and prints the summary and a markdown table of the peers
//! (what BENCHMARKS.md holds).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// What a peer that is not installed is reported with.
struct Peer {
    name: &'static str,
    program: &'static str,
    install: &'static str,
}

const BWRAP: Peer = Peer { name: "bubblewrap", program: "bwrap", install: "apt-get install bubblewrap" };
const CODEX: Peer = Peer { name: "codex sandbox", program: "codex", install: "npm i -g @openai/codex" };
const SRT: Peer = Peer {
    name: "srt",
    program: "srt",
    install: "npm i -g @anthropic-ai/sandbox-runtime (needs ripgrep and socat: apt-get install ripgrep socat)",
};
const TMUX: Peer = Peer { name: "tmux", program: "tmux", install: "apt-get install tmux" };

/// The bubblewrap command line compared with `uexec run`: the namespaces a sandbox for one command uses.
const BWRAP_ARGS: [&str; 13] = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-ipc",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "/bin/true",
];

/// `cargo xtask bench [--quick] [--only NAME]`: NAME is `pty`, `sandbox`, `engine`, `login`, `run` or `clients`.
pub fn run(root: &Path, quick: bool, only: Option<&str>) -> Result<()> {
    let mut report = Vec::new();
    let cargo_benches: [(&str, &str, &str); 4] = [
        ("pty", "uexec-pty", "spawn"),
        ("sandbox", "uexec-sandbox-linux", "spawn"),
        ("engine", "tests", "engine_roundtrip"),
        ("login", "tests", "login_snapshot"),
    ];
    for (key, package, bench) in cargo_benches {
        if only.is_some_and(|only| only != key) {
            continue;
        }
        let output = crate::step(&format!("bench {package}/{bench}"), || {
            let mut args = vec!["bench", "-p", package, "--bench", bench];
            if quick {
                args.extend(["--", "--quick"]);
            }
            captured_cargo(root, &args)
        })?;
        report.push(output);
    }
    if only.is_none_or(|only| only == "run") {
        let output = crate::step("bench run (whole processes, release build)", || run_bench(root, quick))?;
        report.push(output);
    }
    if only.is_none_or(|only| only == "clients") {
        let output = crate::step("bench clients (through the Codex CLI, release build)", || {
            clients_bench(root, quick)
        })?;
        report.push(output);
    }
    summarise(&report.join("\n"))
}

/// Run cargo with `args`, echo its stdout as it is, return it.
fn captured_cargo(root: &Path, args: &[&str]) -> Result<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(args)
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not run cargo {}", args.join(" ")))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{stdout}");
    if !output.status.success() {
        bail!("cargo {} exited with {}", args.join(" "), output.status);
    }
    Ok(stdout)
}

/// One target line: `target: <name> = <value> (<op> <bound>)`, `op` being `<=` or `>=`.
#[derive(Debug, PartialEq)]
struct Target {
    name: String,
    value: f64,
    at_most: bool,
    bound: f64,
}

impl Target {
    fn parse(line: &str) -> Option<Target> {
        let rest = line.strip_prefix("target: ")?;
        let (name, rest) = rest.rsplit_once(" = ")?;
        let (value, rest) = rest.split_once(" (")?;
        let rest = rest.strip_suffix(')')?;
        let (op, bound) = rest.split_once(' ')?;
        let bound = bound.split_whitespace().next()?;
        let at_most = match op {
            "<=" => true,
            ">=" => false,
            _ => return None,
        };
        let value = value.trim_end_matches(['x', ' ']).trim_end_matches(" ms");
        Some(Target {
            name: name.to_owned(),
            value: value.trim().parse().ok()?,
            at_most,
            bound: bound.trim_end_matches('x').parse().ok()?,
        })
    }

    fn met(&self) -> bool {
        if self.at_most { self.value <= self.bound } else { self.value >= self.bound }
    }
}

/// Print every target with met / NOT met, the skipped peers, and the peer rows as one markdown table.
fn summarise(output: &str) -> Result<()> {
    println!("\n==================== summary ====================");
    let mut unmet = 0;
    for line in output.lines() {
        if let Some(target) = Target::parse(line) {
            let verdict = if target.met() { "met" } else { "NOT met" };
            if !target.met() {
                unmet += 1;
            }
            let rest = line.strip_prefix("target: ").unwrap_or(line);
            println!("{rest:<80} {verdict}");
        }
    }
    for line in output.lines().filter_map(|line| line.strip_prefix("skipped: ")) {
        println!("skipped: {line}");
    }
    println!("\nPeers (markdown, for BENCHMARKS.md):\n");
    println!("| peer | benchmark | peer median | uexec median | peer / uexec |");
    println!("|---|---|---|---|---|");
    let metric = |name: &str| {
        output.lines().find_map(|line| {
            let value = line.strip_prefix("metric: ")?.strip_prefix(name)?.strip_prefix(" = ")?;
            value.trim().parse::<f64>().ok()
        })
    };
    for line in output.lines().filter_map(|line| line.strip_prefix("peer-row: ")) {
        println!("{}", fill_row(line, metric("pty-spawn-ms"), metric("write-stdin-ms")));
    }
    println!("\n{unmet} target(s) not met");
    Ok(())
}

/// A peer row whose uexec column points at another bench (`see uexec-pty spawn`, `see engine write_stdin`),
/// filled with that bench's median and the ratio when that bench ran.
fn fill_row(row: &str, pty_spawn_ms: Option<f64>, write_stdin_ms: Option<f64>) -> String {
    for (placeholder, ours) in
        [("see uexec-pty spawn", pty_spawn_ms), ("see engine write_stdin", write_stdin_ms)]
    {
        let Some(ours) = ours else { continue };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // ["", peer, benchmark, peer median, uexec median, ratio, ""]
        if cells.len() == 7 && cells[4] == placeholder {
            let theirs: Option<f64> = cells[3].strip_suffix(" ms").and_then(|v| v.parse().ok());
            let ratio = theirs.map(|theirs| format!("{:.2}x", theirs / ours)).unwrap_or_default();
            return format!("| {} | {} | {} | {ours:.2} ms | {ratio} |", cells[1], cells[2], cells[3]);
        }
    }
    row.to_owned()
}

/// The median of `samples`.
fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// tests/clients/compare.mjs on the release build: uexec against the Codex CLI's own unified exec, through the
/// Codex CLI. Skipped (said so in the summary) when node or the pinned npm clients are not installed.
fn clients_bench(root: &Path, quick: bool) -> Result<String> {
    let clients = root.join("tests/clients");
    let installed = Command::new("node").arg(clients.join("installed.mjs")).output();
    match installed {
        Ok(output) if output.status.success() => {}
        Ok(output) => {
            let why = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            println!("skipped: clients ({why})");
            return Ok(format!("skipped: clients ({why})\n"));
        }
        Err(e) => {
            println!("skipped: clients (node: {e}; apt-get install nodejs npm)");
            return Ok(format!("skipped: clients (node: {e}; apt-get install nodejs npm)\n"));
        }
    }
    crate::cargo(root, &["build", "--release", "--quiet", "-p", "uexec"])?;
    let rounds = if quick { "1" } else { "5" };
    let status = Command::new("node")
        .arg(clients.join("compare.mjs"))
        .args(["--rounds", rounds])
        .env("UEXEC_BIN", root.join("target/release/uexec"))
        .current_dir(root)
        .status()
        .context("could not run node tests/clients/compare.mjs")?;
    if !status.success() {
        bail!("tests/clients/compare.mjs exited with {status}");
    }
    Ok(String::new())
}

/// `program` on the PATH.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// One whole-process contender of the `run` bench.
struct Contender {
    name: String,
    command: Vec<String>,
    samples: Vec<Duration>,
}

impl Contender {
    fn new(name: &str, command: Vec<String>) -> Contender {
        Contender { name: name.to_owned(), command, samples: Vec::new() }
    }

    /// Run once in `dir` (stdin `/dev/null`, output discarded); the wall time from spawn to exit.
    fn time_once(&self, dir: &Path) -> Result<Duration> {
        let (program, args) = self.command.split_first().context("empty command")?;
        let started = Instant::now();
        let status = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("cannot run {}", self.command.join(" ")))?;
        let elapsed = started.elapsed();
        if !status.success() {
            bail!("{} exited with {status}", self.command.join(" "));
        }
        Ok(elapsed)
    }
}

/// Whole processes, interleaved (each round runs every contender once, in a rotating order), medians.
fn run_bench(root: &Path, quick: bool) -> Result<String> {
    crate::cargo(root, &["build", "--release", "--quiet", "-p", "uexec"])?;
    let uexec = root.join("target/release/uexec");
    let mut out = String::new();
    let mut say = |line: String| {
        println!("{line}");
        out.push_str(&line);
        out.push('\n');
    };

    // A workspace like a real one: a git repository (its .git is protected, so the mount namespace is used).
    let scratch = std::env::temp_dir().join(format!("uexec-bench-run-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join(".git")).context("cannot create the bench workspace")?;
    let uexec_str = uexec.display().to_string();
    let mut contenders = vec![
        Contender::new("/bin/true directly", vec!["/bin/true".into()]),
        Contender::new(
            "uexec run (workspace-write)",
            vec![uexec_str.clone(), "run".into(), "--".into(), "/bin/true".into()],
        ),
        Contender::new(
            "uexec run (danger-full-access)",
            vec![
                uexec_str,
                "run".into(),
                "--sandbox".into(),
                "danger-full-access".into(),
                "--".into(),
                "/bin/true".into(),
            ],
        ),
    ];
    let mut skipped = Vec::new();
    for (peer, command) in [
        (&BWRAP, std::iter::once("bwrap").chain(BWRAP_ARGS).map(str::to_owned).collect::<Vec<_>>()),
        (&CODEX, ["codex", "sandbox", "--", "/bin/true"].map(str::to_owned).to_vec()),
        (&SRT, ["srt", "/bin/true"].map(str::to_owned).to_vec()),
    ] {
        let contender = Contender::new(peer.name, command);
        if which(peer.program).is_none() {
            skipped.push(peer);
            continue;
        }
        // A peer that is installed but cannot run here (missing dependencies) is reported, not measured.
        match contender.time_once(&scratch) {
            Ok(_) => contenders.push(contender),
            Err(error) => say(format!("skipped: {} does not run here ({error:#})", peer.name)),
        }
    }
    for peer in &skipped {
        say(format!("skipped: {}: not installed ({})", peer.name, peer.install));
    }

    let rounds = if quick { 15 } else { 60 };
    let warmup = 3;
    for round in 0..rounds + warmup {
        for k in 0..contenders.len() {
            let index = (round + k) % contenders.len();
            let contender = &contenders[index];
            let elapsed = contender.time_once(&scratch)?;
            if round >= warmup {
                contenders[index].samples.push(elapsed);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);

    say(format!("\nWhole process, spawn to exit, {rounds} interleaved rounds (release build)"));
    say(format!("{:<34} {:>10} {:>10}", "contender", "median", "p90"));
    for contender in &contenders {
        let mut sorted = contender.samples.clone();
        sorted.sort();
        let p90 = sorted.get(sorted.len() * 9 / 10).copied().unwrap_or_default();
        say(format!("{:<34} {:>7.2} ms {:>7.2} ms", contender.name, ms(median(&sorted)), ms(p90)));
    }
    let median_of = |name: &str| contenders.iter().find(|c| c.name == name).map(|c| median(&c.samples));
    let ours = median_of("uexec run (workspace-write)").context("no uexec samples")?;
    say(format!("target: uexec run -- /bin/true median = {:.2} ms (<= 3.0 ms goal)", ms(ours)));
    let what = "`/bin/true`, whole process, sandboxed";
    for (peer, at_most, bound) in [(&BWRAP, true, 1.0), (&CODEX, false, 10.0), (&SRT, false, 10.0)] {
        let Some(theirs) = median_of(peer.name) else {
            say(format!(
                "peer-row: | {} | {what} | skipped: not installed ({}) | | |",
                peer.name, peer.install
            ));
            continue;
        };
        let ratio = if at_most {
            say(format!(
                "target: uexec run / {} = {:.2}x (<= {bound:.1}x)",
                peer.name,
                ours.as_secs_f64() / theirs.as_secs_f64()
            ));
            theirs.as_secs_f64() / ours.as_secs_f64()
        } else {
            let faster = theirs.as_secs_f64() / ours.as_secs_f64();
            say(format!("target: uexec run faster than {} = {faster:.1}x (>= {bound:.0}x)", peer.name));
            faster
        };
        say(format!(
            "peer-row: | {} | {what} | {:.2} ms | {:.2} ms | {ratio:.2}x |",
            peer.name,
            ms(theirs),
            ms(ours)
        ));
    }

    pty_peers(quick, &mut say)?;
    Ok(out)
}

/// The PTY peers: pexpect (a Python loop: spawn `/bin/true` in a PTY to its end of file, and the `echo hi` round
/// trip on `bash -i`) and tmux (a window running `/bin/true` to its exit, driven by the tmux client). uexec's
/// figures for the same work come from the `pty` and `engine` benches.
fn pty_peers(quick: bool, say: &mut impl FnMut(String)) -> Result<()> {
    let rounds = if quick { 30 } else { 150 };
    let pexpect = Command::new("python3")
        .args(["-c", PEXPECT_BENCH, &rounds.to_string()])
        .stdin(Stdio::null())
        .output();
    match pexpect {
        Ok(output) if output.status.success() => {
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                say(format!("peer-row: | pexpect | {line}"));
            }
        }
        _ => say("skipped: pexpect: not installed (pip install pexpect)".to_owned()),
    }
    if which(TMUX.program).is_none() {
        say(format!("skipped: tmux: not installed ({})", TMUX.install));
        return Ok(());
    }
    let socket = std::env::temp_dir().join(format!("uexec-bench-tmux-{}", std::process::id()));
    let socket = socket.display().to_string();
    let tmux = |args: &[&str]| -> Result<()> {
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("tmux {} exited with {status}", args.join(" "));
        }
        Ok(())
    };
    tmux(&["-f", "/dev/null", "new-session", "-d", "-s", "bench"])?;
    let mut samples = Vec::new();
    for round in 0..rounds / 3 + 3 {
        let channel = format!("done{round}");
        let started = Instant::now();
        let command = format!("/bin/true; tmux -S {socket} wait-for -S {channel}");
        tmux(&["new-window", "-d", "-t", "bench", &command])?;
        tmux(&["wait-for", &channel])?;
        if round >= 3 {
            samples.push(started.elapsed());
        }
    }
    let _ = tmux(&["kill-server"]);
    say(format!(
        "peer-row: | tmux | `/bin/true` in a new window, to exit (tmux client calls) | {:.2} ms | see uexec-pty spawn | |",
        ms(median(&samples))
    ));
    Ok(())
}

/// Prints markdown cells (benchmark | peer median | uexec median | ratio) for pexpect: spawn to EOF and exit
/// status of `/bin/true` in a PTY (timed without `close`, whose default 100 ms `delayafterclose` would dominate),
/// and the `echo hi` round trip on `bash -i` (with `delaybeforesend` off: its default adds 50 ms per send).
/// uexec's medians come from the other benches.
const PEXPECT_BENCH: &str = r#"
import sys, time, statistics, pexpect
n = int(sys.argv[1])
spawn = []
for i in range(n + 5):
    t = time.perf_counter()
    c = pexpect.spawn('/bin/true')
    c.expect(pexpect.EOF)
    c.wait()
    if i >= 5: spawn.append(time.perf_counter() - t)
    c.close()
bash = pexpect.spawn('bash', ['--norc', '--noprofile', '-i'], env={'PS1': 'PROMPT$ ', 'TERM': 'dumb', 'PATH': '/usr/bin:/bin'}, encoding='utf-8')
bash.delaybeforesend = None
bash.expect_exact('PROMPT$ ')
trip = []
for i in range(n + 5):
    t = time.perf_counter()
    bash.sendline('echo hi')
    bash.expect_exact('hi\r\nPROMPT$ ')
    if i >= 5: trip.append(time.perf_counter() - t)
bash.close(force=True)
print('`/bin/true` in a new PTY, to exit (in-process loop) | %.2f ms | see uexec-pty spawn | |' % (statistics.median(spawn) * 1e3))
print('`echo hi` round trip on `bash -i`, to the prompt | %.2f ms | see engine write_stdin | |' % (statistics.median(trip) * 1e3))
"#;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn target_lines_parse_and_judge() {
        let t = Target::parse("target: spawn uexec-pty/posix_spawn = 1.07 (<= 1.15)").unwrap();
        assert_eq!(t.name, "spawn uexec-pty/posix_spawn");
        assert!(t.met());
        let t = Target::parse("target: throughput uexec-pty/raw = 0.85 (>= 0.90)").unwrap();
        assert!(!t.met());
        let t = Target::parse("target: uexec run -- /bin/true median = 3.40 ms (<= 3.0 ms goal)").unwrap();
        assert_eq!((t.value, t.bound), (3.4, 3.0));
        assert!(!t.met());
        let t = Target::parse("target: uexec run faster than codex sandbox = 41.0x (>= 10x)").unwrap();
        assert!(t.met());
        assert_eq!(Target::parse("target: nonsense"), None);
        assert_eq!(Target::parse("spawn = 1 (<= 2)"), None);
    }

    #[test]
    fn rows_pointing_at_another_bench_are_filled_when_it_ran() {
        let row = "| tmux | `/bin/true` in a new window | 22.00 ms | see uexec-pty spawn | |";
        assert_eq!(
            fill_row(row, Some(1.1), None),
            "| tmux | `/bin/true` in a new window | 22.00 ms | 1.10 ms | 20.00x |"
        );
        assert_eq!(fill_row(row, None, Some(1.0)), row);
        let row = "| pexpect | `echo hi` round trip | 0.25 ms | see engine write_stdin | |";
        assert_eq!(
            fill_row(row, None, Some(0.5)),
            "| pexpect | `echo hi` round trip | 0.25 ms | 0.50 ms | 0.50x |"
        );
    }
}
