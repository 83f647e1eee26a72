//! Unit tests of the process-control edge, against real processes: start
//! times, pinning, signals to processes and groups, reaping, the subreaper
//! and a real pid reuse.

use super::pidfd::PinError;
use super::proc::{children_by_scan, parse_pid_list, parse_stat, read_stat, Stat};
use super::*;
use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and waits a child on drop, so no test leaves `sleep 30` behind,
/// whatever assertion failed.
struct Guard(Child);

impl Guard {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Kills a pinned (non-child) process on drop: cleanup for grandchildren.
struct PinnedGuard(Option<Pinned>);

impl Drop for PinnedGuard {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = p.signal(libc::SIGKILL);
        }
    }
}

fn sleeper() -> Guard {
    let child = Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sleep");
    Guard(child)
}

fn poll_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Gone for a test's purposes: no /proc entry, a zombie, or another
/// process (start time differs).
fn gone(pid: u32, start: u64) -> bool {
    match read_stat(pid) {
        Ok(stat) => stat.state == b'Z' || stat.start_time != start,
        Err(err) => err.kind() == io::ErrorKind::NotFound,
    }
}

fn line(comm: &str, start: u64) -> String {
    // Fields 3..=21 then 22 (start time) then a few more.
    let mut s = format!("4242 ({comm}) S 1 4242 4242 0 -1 4194560");
    for _ in 10..=21 {
        s.push_str(" 7");
    }
    s.push_str(&format!(" {start} 12345 67 18446744073709551615 1 1 0\n"));
    s
}

#[test]
fn parses_start_time_after_the_last_paren() {
    assert_eq!(
        parse_stat_start_time(&line("sleep", 987_654)),
        Some(987_654)
    );
    assert_eq!(parse_stat_start_time(&line("a) b) c", 42)), Some(42));
    assert_eq!(parse_stat_start_time(&line("(x) 9 9 9 (", 7)), Some(7));
    assert_eq!(parse_stat_start_time(&line("", 1)), Some(1));
    let parsed = parse_stat(line("a) R 3 (", 5).as_bytes()).unwrap();
    assert_eq!(
        parsed,
        Stat {
            state: b'S',
            ppid: 1,
            pgrp: 4242,
            start_time: 5
        }
    );
    // Non-UTF-8 comm is fine at the byte level.
    let mut bytes = b"12 (\xff\xfe) Z 77".to_vec();
    bytes.extend_from_slice(&b" 0".repeat(17));
    bytes.extend_from_slice(b" 99 0\n");
    assert_eq!(
        parse_stat(&bytes),
        Some(Stat {
            state: b'Z',
            ppid: 77,
            pgrp: 0,
            start_time: 99
        })
    );
}

#[test]
fn rejects_garbage_stat_lines() {
    // Fields 5..=21 (17 of them), so the next one is field 22.
    let mid = " 0".repeat(17);
    let good = format!("12 (sleep) S 1{mid} 5 0");
    assert_eq!(parse_stat_start_time(&good), Some(5));
    for bad in [
        String::new(),
        "garbage".into(),
        "12 sleep S 1 2 3".into(),
        format!("12 (sleep S 1{mid} 5"),
        format!(") 12 (sleep S 1{mid} 5"),
        format!("x (sleep) S 1{mid} 5"),
        format!("(sleep) S 1{mid} 5"),
        format!("12 (sleep) S 1{mid}"),
        format!("12 (sleep) S 1{mid} -5"),
        format!("12 (sleep) S 1{mid} x5"),
        format!("12 (sleep) S 1{mid} 18446744073709551616"),
        format!("12 (sleep) SS 1{mid} 5"),
        format!("12 (sleep) S -1{mid} 5"),
    ] {
        assert_eq!(parse_stat_start_time(&bad), None, "{bad:?}");
    }
    assert_eq!(parse_pid_list("12 34 \n"), vec![12, 34]);
    assert_eq!(parse_pid_list(""), Vec::<u32>::new());
}

#[test]
fn start_time_of_self_and_of_a_reaped_child() {
    let me = proc_start_time(std::process::id()).unwrap();
    assert!(me > 0);
    assert_eq!(
        proc_start_time(0).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );

    let mut child = sleeper();
    let pid = child.pid();
    let start = proc_start_time(pid).unwrap();
    assert!(start >= me);
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    match proc_start_time(pid) {
        Err(err) => assert_eq!(err.kind(), io::ErrorKind::NotFound),
        // The pid was handed out again already: a different process.
        Ok(other) => assert_ne!(other, start),
    }
}

#[test]
fn identity_same_then_gone() {
    let mut child = sleeper();
    let pid = child.pid();
    let start = proc_start_time(pid).unwrap();
    assert_eq!(check_identity(pid, start), Identity::Same);
    assert_eq!(check_identity(pid, start + 1), Identity::Gone);
    assert_eq!(check_identity(0, start), Identity::Gone);
    // A zombie is still the same process until reaped.
    signal_child(pid, libc::SIGKILL).unwrap();
    poll_until("zombie", || read_stat(pid).is_ok_and(|s| s.state == b'Z'));
    assert_eq!(check_identity(pid, start), Identity::Same);
    child.0.wait().unwrap();
    assert_eq!(check_identity(pid, start), Identity::Gone);
}

#[test]
fn pinned_signal_reaches_the_right_process() {
    let mut child = sleeper();
    let pid = child.pid();
    let start = proc_start_time(pid).unwrap();
    let pinned = Pinned::open(pid, start).unwrap();
    assert_eq!(pinned.pid(), pid);
    assert_eq!(pinned.start_time(), start);
    assert!(pinned.is_alive());
    assert!(pinned.signal(0).unwrap(), "signal 0 probes a live process");
    assert!(pinned.signal(libc::SIGTERM).unwrap());
    let status = child.0.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert!(!pinned.is_alive());
}

#[test]
fn pinned_open_with_a_wrong_start_time_is_gone_and_sends_nothing() {
    let mut child = sleeper();
    let pid = child.pid();
    let start = proc_start_time(pid).unwrap();
    assert!(matches!(Pinned::open(pid, start + 1), Err(PinError::Gone)));
    assert!(matches!(
        Pinned::open(pid, start.wrapping_sub(1)),
        Err(PinError::Gone)
    ));
    assert!(matches!(Pinned::open(0, start), Err(PinError::Gone)));
    assert!(matches!(Pinned::open(u32::MAX, start), Err(PinError::Gone)));
    // Still alive: nothing was signalled.
    assert!(child.0.try_wait().unwrap().is_none());
    assert_eq!(check_identity(pid, start), Identity::Same);
}

#[test]
fn pinned_thread_id_is_gone() {
    // A thread id is not a process: pidfd_open answers EINVAL.
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        // SAFETY: gettid() takes no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        tx.send(tid as u32).unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    if tid != std::process::id() {
        let start = proc_start_time(tid).unwrap();
        let r = Pinned::open(tid, start);
        assert!(matches!(r, Err(PinError::Gone)), "{r:?}");
    }
    done_tx.send(()).unwrap();
    handle.join().unwrap();
}

#[test]
fn pinned_after_exit_and_reap_reports_already_exited() {
    let mut child = sleeper();
    let pid = child.pid();
    let start = proc_start_time(pid).unwrap();
    let pinned = Pinned::open(pid, start).unwrap();
    child.0.kill().unwrap();
    // Zombie (exited, not reaped): already exited, nothing sent.
    assert!(pinned.wait_exit(Duration::from_secs(10)));
    assert!(!pinned.is_alive());
    assert!(!pinned.signal(libc::SIGKILL).unwrap());
    // The zombie still holds the group id and is its only member: the
    // kernel counts a zombie as a member that "got" the signal.
    assert!(pinned.signal_group(libc::SIGKILL).unwrap());
    child.0.wait().unwrap();
    // Reaped: the pidfd still names the dead incarnation only.
    assert!(!pinned.is_alive());
    assert!(pinned.wait_exit(Duration::ZERO));
    for sig in [0, libc::SIGTERM, libc::SIGKILL] {
        assert!(!pinned.signal(sig).unwrap());
        assert!(!pinned.signal_group(sig).unwrap());
    }
    assert!(matches!(Pinned::open(pid, start), Err(PinError::Gone)));
}

#[test]
fn signal_group_reaches_a_grandchild() {
    let mut child = Command::new("sh")
        .args(["-c", "sleep 30 & echo $!; wait"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let stdout = child.stdout.take().unwrap();
    let child = Guard(child);
    let pid = child.pid();
    let mut text = String::new();
    BufReader::new(stdout).read_line(&mut text).unwrap();
    let gpid: u32 = text.trim().parse().expect("grandchild pid");
    let gstart = proc_start_time(gpid).unwrap();
    let _cleanup = PinnedGuard(Pinned::open(gpid, gstart).ok());

    let start = proc_start_time(pid).unwrap();
    let pinned = Pinned::open(pid, start).unwrap();
    assert!(pinned.signal_group(libc::SIGKILL).unwrap());
    assert!(pinned.wait_exit(Duration::from_secs(10)));
    poll_until("the grandchild is gone", || gone(gpid, gstart));
    drop(child);
}

#[test]
fn a_member_signals_its_group_and_a_leader_is_known_as_one() {
    let mut child = Command::new("sh")
        .args(["-c", "sleep 30 & echo $!; wait"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let stdout = child.stdout.take().unwrap();
    let mut child = Guard(child);
    let pid = child.pid();
    let mut text = String::new();
    BufReader::new(stdout).read_line(&mut text).unwrap();
    let gpid: u32 = text.trim().parse().expect("grandchild pid");
    let gstart = proc_start_time(gpid).unwrap();
    let member = Pinned::open(gpid, gstart).unwrap();
    let _cleanup = PinnedGuard(Pinned::open(gpid, gstart).ok());
    assert!(!member.leader);
    let leader = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
    assert!(leader.leader);
    // The member's group is the leader's: both end.
    assert!(member.signal_own_group(libc::SIGKILL).unwrap());
    assert!(member.wait_exit(Duration::from_secs(10)));
    let status = child.0.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // Once gone, a member signals nothing.
    assert!(!member.signal_member_group(libc::SIGKILL).unwrap());
}

#[test]
fn reap_child_reports_the_status_of_an_exited_child_only() {
    let sh = |script: &str| {
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sh")
    };
    let exits = sh("exit 7");
    let pid = exits.id();
    let pinned = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
    assert!(pinned.wait_exit(Duration::from_secs(10)));
    assert_eq!(reap_child(pid), Some((Some(7), None)));
    assert_eq!(reap_child(pid), None, "reaped once");
    drop(exits);

    let killed = sh("kill -TERM $$");
    let pid = killed.id();
    let pinned = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
    assert!(pinned.wait_exit(Duration::from_secs(10)));
    assert_eq!(reap_child(pid), Some((None, Some(libc::SIGTERM))));
    drop(killed);

    // Running, and not a child at all.
    let running = sleeper();
    assert_eq!(reap_child(running.pid()), None);
    assert_eq!(reap_child(1), None);
}

#[test]
fn signal_group_after_the_leader_was_reaped_reaches_leftover_members() {
    // The leader exits at once, leaving `sleep` behind in its group.
    let mut leader = Command::new("sh")
        .args(["-c", "sleep 30 & echo $!"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let stdout = leader.stdout.take().unwrap();
    let mut leader = Guard(leader);
    let pid = leader.pid();
    let start = proc_start_time(pid).unwrap();
    let pinned = Pinned::open(pid, start).unwrap();
    let mut text = String::new();
    BufReader::new(stdout).read_line(&mut text).unwrap();
    let gpid: u32 = text.trim().parse().expect("grandchild pid");
    let gstart = proc_start_time(gpid).unwrap();
    let _cleanup = PinnedGuard(Pinned::open(gpid, gstart).ok());
    assert!(leader.0.wait().unwrap().success());
    assert!(!pinned.is_alive());
    assert!(!gone(gpid, gstart), "the leftover member is still running");
    assert!(pinned.signal_group(libc::SIGKILL).unwrap());
    poll_until("the leftover member is gone", || gone(gpid, gstart));
}

#[test]
fn wait_exit_times_out_then_sees_the_exit() {
    let mut child = sleeper();
    let pid = child.pid();
    let pinned = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
    let t0 = Instant::now();
    assert!(!pinned.wait_exit(Duration::from_millis(100)));
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert!(!pinned.wait_exit(Duration::ZERO));
    signal_child(pid, libc::SIGKILL).unwrap();
    assert!(pinned.wait_exit(Duration::from_secs(10)));
    assert_eq!(child.0.wait().unwrap().signal(), Some(libc::SIGKILL));
}

#[test]
fn signal_child_and_group_of_child() {
    let mut child = sleeper();
    let pid = child.pid();
    assert!(signal_group_of_child(pid, 0).unwrap());
    signal_child(pid, 0).unwrap();
    assert!(signal_group_of_child(pid, libc::SIGKILL).unwrap());
    assert_eq!(child.0.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(
        !signal_group_of_child(pid, 0).unwrap(),
        "the group is empty"
    );
    // Dangerous targets are refused before any syscall.
    for bad in [0, 1, u32::MAX, 1 << 31] {
        assert_eq!(
            signal_child(bad, 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            signal_group_of_child(bad, 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
    // SAFETY: getpgrp() takes no arguments and cannot fail.
    let own = unsafe { libc::getpgrp() } as u32;
    assert_eq!(
        signal_group_of_child(own, 0).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn pin_error_messages() {
    assert!(PinError::Gone.to_string().contains("gone"));
    assert!(PinError::Unsupported.to_string().contains("5.3"));
    let io = PinError::Io(io::Error::other("boom"));
    assert!(io.to_string().contains("boom"));
    assert!(std::error::Error::source(&io).is_some());
}

// ---- tests that need a process of their own ------------------------

const INNER: &str = "SIMPLEX_HUB_SYS_INNER_TEST";

/// Runs the test `name` of this module in a fresh copy of the test
/// binary (optionally under `wrapper`), with INNER set so its body runs.
/// Returns None if the wrapper could not start it.
fn run_inner(name: &str, wrapper: &[&str]) -> Option<String> {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, m)| m);
    let filter = format!("{module}::{name}");
    let exe = std::env::current_exe().unwrap();
    let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
    argv.push(exe.display().to_string());
    argv.extend([
        filter,
        "--exact".into(),
        "--test-threads=1".into(),
        "--nocapture".into(),
    ]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env(INNER, name)
        .stdin(Stdio::null())
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !stdout.contains("running 1 test") {
        eprintln!("inner test {name} did not start: {stderr}");
        return None;
    }
    assert!(
        out.status.success() && stdout.contains(&format!("inner {name} ok")),
        "inner test {name} failed:\n{stdout}\n{stderr}"
    );
    Some(stdout)
}

fn is_inner(name: &str) -> bool {
    std::env::var(INNER).as_deref() == Ok(name)
}

#[test]
fn subreaper_reaps_orphans_but_not_kept_children() {
    // The subreaper flag is process-wide, and reap_orphans reaps every
    // child not kept: run it in a process of its own.
    run_inner("inner_subreaper", &[]).expect("the inner test runs");
}

#[test]
fn inner_subreaper() {
    if !is_inner("inner_subreaper") {
        return;
    }
    set_child_subreaper().unwrap();
    let me = std::process::id();
    // A kept child that exits: reap_orphans must leave it alone.
    let mut kept = sleeper();
    let kept_pid = kept.pid();
    signal_child(kept_pid, libc::SIGKILL).unwrap();
    poll_until("kept child is a zombie", || {
        read_stat(kept_pid).is_ok_and(|s| s.state == b'Z')
    });
    // Double fork: sh starts sleep and exits; sleep is orphaned to us.
    let mut sh = Command::new("sh")
        .args(["-c", "sleep 30 & echo $!"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let stdout = sh.stdout.take().unwrap();
    let mut sh = Guard(sh);
    let mut text = String::new();
    BufReader::new(stdout).read_line(&mut text).unwrap();
    let orphan: u32 = text.trim().parse().expect("orphan pid");
    let ostart = proc_start_time(orphan).unwrap();
    let _cleanup = PinnedGuard(Pinned::open(orphan, ostart).ok());
    assert!(sh.0.wait().unwrap().success());
    poll_until("the orphan is reparented to us", || {
        read_stat(orphan).is_ok_and(|s| s.ppid == me)
    });
    let children = list_children();
    assert!(children.contains(&orphan), "{children:?}");
    assert!(children.contains(&kept_pid), "{children:?}");
    assert_eq!(children_by_scan(me).len(), children.len());
    // Still running: nothing to reap.
    assert!(reap_orphans(&[kept_pid]).is_empty());
    signal_child(orphan, libc::SIGKILL).unwrap();
    let mut reaped = Vec::new();
    poll_until("the orphan is reaped", || {
        reaped.extend(reap_orphans(&[kept_pid]));
        reaped.contains(&orphan)
    });
    assert!(!reaped.contains(&kept_pid));
    assert!(gone(orphan, ostart));
    // The kept child's status is still ours to collect.
    assert_eq!(kept.0.wait().unwrap().signal(), Some(libc::SIGKILL));
    println!("inner inner_subreaper ok");
}

#[test]
fn real_pid_reuse_never_reaches_the_stranger() {
    // Forcing a pid to be reused needs a pid namespace of our own (so
    // ns_last_pid touches nobody else): root and unshare(1) required.
    let wrapper = ["unshare", "--pid", "--fork", "--mount-proc"];
    if run_inner("inner_pid_reuse", &wrapper).is_none() {
        eprintln!("skipped: cannot create a pid namespace here");
    }
}

/// Clock ticks since boot, from /proc/uptime (centiseconds; USER_HZ is
/// 100 on Linux).
fn uptime_ticks() -> u64 {
    let text = fs::read_to_string("/proc/uptime").unwrap();
    let up = text.split_ascii_whitespace().next().unwrap();
    let (secs, centis) = up.split_once('.').unwrap();
    secs.parse::<u64>().unwrap() * 100 + centis.parse::<u64>().unwrap()
}

#[test]
fn inner_pid_reuse() {
    if !is_inner("inner_pid_reuse") {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "could not get the pid reused");
        let mut old = sleeper();
        let pid = old.pid();
        let start = proc_start_time(pid).unwrap();
        let pinned = Pinned::open(pid, start).unwrap();
        old.0.kill().unwrap();
        old.0.wait().unwrap();
        // Let the clock tick past the old start time (10 ms resolution),
        // so the start-time check has something to tell apart.
        poll_until("a new clock tick", || uptime_ticks() > start + 1);
        fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).unwrap();
        let mut stranger = sleeper();
        let spid = stranger.pid();
        let sstart = proc_start_time(spid).unwrap();
        if spid != pid || sstart == start {
            // Not reused, or reused within the same clock tick (start
            // times have 10 ms resolution): try again.
            continue;
        }
        // The stranger has our old pid, and is its own group leader.
        assert!(!pinned.is_alive());
        assert!(pinned.wait_exit(Duration::ZERO));
        assert!(!pinned.signal(libc::SIGKILL).unwrap());
        assert!(!pinned.signal_group(libc::SIGKILL).unwrap());
        assert_eq!(check_identity(pid, start), Identity::Gone);
        assert!(matches!(Pinned::open(pid, start), Err(PinError::Gone)));
        assert_eq!(check_identity(pid, sstart), Identity::Same);
        let watch = Pinned::open(spid, sstart).unwrap();
        assert!(
            !watch.wait_exit(Duration::from_millis(100)),
            "the stranger was signalled"
        );
        assert!(
            stranger.0.try_wait().unwrap().is_none(),
            "the stranger was signalled"
        );
        break;
    }
    println!("inner inner_pid_reuse ok");
}
