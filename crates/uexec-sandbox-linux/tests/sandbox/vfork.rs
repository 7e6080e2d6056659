//! The privileged path in a `clone(CLONE_VM | CLONE_VFORK)` child, as the real spawner runs it: the hook shares
//! the parent's memory, so it must not allocate, lock or write what the parent reads.

use std::ffi::{CString, c_void};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use uexec_ports::process::ChildSetup;

use crate::common::{Scratch, prepare, workspace_only};

/// What the child needs, prepared before the clone.
struct ChildArgs {
    hooks: Vec<Arc<dyn ChildSetup>>,
    cwd: CString,
    program: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

extern "C" fn child_main(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` points at the parent's ChildArgs, alive (and not touched by the suspended parent) until exec.
    let args = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: async-signal-safe calls on prepared data; _exit never returns.
    unsafe {
        if libc::chdir(args.cwd.as_ptr()) != 0 {
            libc::_exit(120);
        }
        for hook in &args.hooks {
            if hook.run_in_child().is_err() {
                libc::_exit(121);
            }
        }
        libc::execve(args.program.as_ptr(), args.argv.as_ptr(), args.envp.as_ptr());
        libc::_exit(127)
    }
}

/// Run `spawn` in a `clone(CLONE_VM | CLONE_VFORK)` child; its exit code (120: chdir, 121: hook, 127: exec).
fn run_in_vfork_child(spawn: &uexec_ports::process::SpawnRequest) -> i32 {
    let strings: Vec<CString> = spawn.argv.iter().map(|a| CString::new(a.as_bytes()).unwrap()).collect();
    let env: Vec<CString> = spawn
        .env
        .iter()
        .map(|(k, v)| CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).unwrap())
        .collect();
    let mut argv: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|s| s.as_ptr()).collect();
    envp.push(std::ptr::null());
    let args = ChildArgs {
        hooks: spawn.setup.clone(),
        cwd: CString::new(spawn.cwd.as_os_str().as_bytes()).unwrap(),
        program: strings[0].clone(),
        argv,
        envp,
    };
    let mut stack = vec![0u8; 256 * 1024];
    // SAFETY: the stack is owned by this frame and outlives the vfork child (the parent is suspended until the
    // child execs or exits); the top is 16-byte aligned as the ABI requires.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len()) as usize & !15;
        libc::clone(
            child_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &args as *const ChildArgs as *mut c_void,
        )
    };
    assert!(pid > 0, "clone: {}", std::io::Error::last_os_error());
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    libc::WEXITSTATUS(status)
}

#[test]
fn privileged_hook_works_in_a_vfork_child() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join(".git")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n").unwrap();
    let script = format!(
        "echo in > ok.txt && ! (echo x > {}/secret.txt) 2>/dev/null && ! (echo x >> .git/config) 2>/dev/null \
         && grep -q '^Seccomp:.2' /proc/self/status && grep -q '^NoNewPrivs:.1' /proc/self/status",
        s.outside.display()
    );
    let prepared = prepare(workspace_only(vec![], false), &["/bin/bash", "-c", &script], &s.ws);
    assert!(prepared.spawn.setup.iter().all(|h| !h.requires_fork()));
    assert_eq!(run_in_vfork_child(&prepared.spawn), 0, "the confined probe failed");
    assert_eq!(Scratch::read(&s.ws.join("ok.txt")), "in\n");
    assert_eq!(Scratch::read(&s.outside.join("secret.txt")), "original\n");
    assert_eq!(Scratch::read(&s.ws.join(".git/config")), "[core]\n");
}
