//! Child processes run to their exit within a deadline: a test never waits on one for
//! ever. One that overruns is killed, and the test fails naming the command and the
//! deadline it overran.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A tool, or a run of the exporter to its exit, on a loaded machine.
pub const QUICK: Duration = Duration::from_secs(120);
/// A compiler, a cargo build, a container run: minutes on 2 busy cores.
pub const BUILD: Duration = Duration::from_secs(1800);

/// `cmd.output()` (stdin null, stdout and stderr captured) that kills the command and
/// fails the test after `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    child_output_within(child, limit, &what)
}

/// [`output_within`] that fails the test, naming `what` and showing what the command
/// printed, unless the command succeeds.
pub fn succeed_within(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    let out = output_within(cmd, limit);
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cmd.status()` (its stdio as configured, inherited by default) within `limit`.
pub fn status_within(cmd: &mut Command, limit: Duration) -> ExitStatus {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    wait_within(&mut child, limit, &what)
}

/// `child.wait_with_output()` within `limit` (the pipes it was spawned with are read to
/// their end); `what` names it in the failure.
pub fn child_output_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_within(&mut child, limit, what);
    // A process it left behind may hold the pipes open: they get what is left of the time.
    let collect = |rx: Receiver<Vec<u8>>| {
        let left = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(left.max(Duration::from_secs(1)))
            .unwrap_or_else(|_| panic!("{what}: its output did not end within {limit:?}"))
    };
    let stdout = collect(stdout);
    let stderr = collect(stderr);
    Output {
        status,
        stdout,
        stderr,
    }
}

/// `child.wait()` within `limit`: killed, and the test failed, when it overruns.
pub fn wait_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not exit within {limit:?}: killed");
            }
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
}

/// Reads the child's piped stdout line by line, handing each line to `on_line` as it
/// comes; kills the child and fails the test when its output has not ended within `limit`.
pub fn read_lines_within(
    child: &mut Child,
    limit: Duration,
    what: &str,
    mut on_line: impl FnMut(&str),
) {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => on_line(&line),
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what}: its output did not end within {limit:?}: killed");
            }
        }
    }
}

/// Writes `input` to the child's stdin (then closes it), on a thread of its own so that a
/// child that writes before it reads cannot block it.
pub fn feed(child: &mut Child, input: Vec<u8>) {
    let mut stdin = child.stdin.take().expect("piped stdin");
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
}

/// Reads a pipe to its end on a thread; the bytes arrive on the receiver (none without a
/// pipe).
fn drain(pipe: Option<impl Read + Send + 'static>) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        let _ = tx.send(buf);
    });
    rx
}
