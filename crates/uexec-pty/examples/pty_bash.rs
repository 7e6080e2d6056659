//! An interactive `bash -i` driven through uexec-pty alone: spawn it in a PTY, write commands, read its
//! output up to each prompt, resize the terminal, then kill it with everything it started.
//!
//! `cargo run -p uexec-pty --example pty_bash`. It needs no terminal of its own (CI runs it with none), prints
//! what bash printed, and exits 0 only when every step behaved.
#![allow(clippy::print_stdout, reason = "an example: showing the session's output is its job")]

use std::error::Error;
use std::time::Duration;

use uexec_pty::{Command, ExitStatus, OutputStream, ProcessControl, PtyOutput, PtySize, PtySpawner};

/// How long any one step may take before the example gives up.
const STEP: Duration = Duration::from_secs(20);

/// The output half plus what was read past the last needle.
struct Reader {
    output: PtyOutput,
    pending: String,
}

impl Reader {
    /// Read output until `needle` appears; returns (and prints) everything up to and including it, keeping
    /// the rest for the next call.
    async fn until(&mut self, needle: &str) -> Result<String, Box<dyn Error>> {
        loop {
            if let Some(at) = self.pending.find(needle) {
                let rest = self.pending.split_off(at + needle.len());
                let text = std::mem::replace(&mut self.pending, rest);
                print!("{text}");
                return Ok(text);
            }
            match tokio::time::timeout(STEP, self.output.next_chunk()).await {
                Ok(Ok(Some(chunk))) => self.pending.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Ok(None)) => return Err(format!("bash ended before printing {needle:?}").into()),
                Ok(Err(error)) => return Err(error.into()),
                Err(_) => return Err(format!("no {needle:?} within {STEP:?}: {:?}", self.pending).into()),
            }
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        // No startup files, a known prompt: the output is the same on every machine.
        let command = Command::new("bash").args(["--norc", "--noprofile", "-i"]).env("PS1", "demo$ ");
        let process = PtySpawner::default().spawn_command(command)?;
        let (control, mut output) =
            (process.control, Reader { output: process.output, pending: String::new() });
        output.until("demo$ ").await?;

        control.write(b"greeting=hello; echo \"$greeting from $$\"\n").await?;
        let text = output.until("demo$ ").await?;
        if !text.contains(&format!("hello from {}", control.pid())) {
            return Err("bash did not answer the first command".into());
        }

        // Bash redraws its prompt on the SIGWINCH the resize sends; `stty size` then reports the new size.
        control.resize(PtySize { rows: 30, cols: 100 })?;
        control.write(b"stty size\n").await?;
        output.until("30 100").await?;
        output.until("demo$ ").await?;

        // A background job and a command that never ends: kill_tree stops all of it.
        control.write(b"sleep 1000 & sleep 1000\n").await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = control.kill_tree().await?;
        println!("\n[bash and its jobs killed: {status:?}]");
        if !matches!(status, ExitStatus::Signal(_)) {
            return Err(format!("bash was expected to die by a signal, got {status:?}").into());
        }
        Ok(())
    })
}
