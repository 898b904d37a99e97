//! The libfabric provider `rdm4` (`fi/`, issue 40), run by libfabric's own
//! tools and by Open MPI: `fi_info`, `fi_pingpong` on one host and across
//! two network namespaces, `fi/tests/fi_check.c` (the libfabric API on
//! every domain, and under valgrind), and `fi/tests/mpi_check.c` under
//! `mpirun` with `pml cm`, `mtl ofi` on rdm4 (one-sided over `osc pt2pt`;
//! on one host over every device, pinned by `FI_RDM4_DEVICE`),
//! on one host and with two ranks in each of two namespaces, and one-sided
//! over `osc rdma` on `btl ofi` on rdm4 across the namespaces.
//!
//! The provider is built from this test run's `librdm4.a` by `make -C fi`
//! into `target/c_tests/<profile>/fi/`. Where libfabric's headers or tools,
//! or Open MPI, are missing, the tests that need them say so and pass,
//! unless `RDM4_REQUIRE_FI=1` (set by `.ci/run`, which installs them) makes
//! that a failure.

#[path = "common_c/mod.rs"]
mod common_c;
#[path = "common_netns/mod.rs"]
mod common_netns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common_c::{env, MANIFEST_DIR};
use common_netns::Netns;

/// Whether `tool` is on the PATH.
fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

/// True when the test can run; false (after saying why) when something it
/// needs is missing and that is allowed.
fn needs(what: &[&str], headers: bool) -> bool {
    let mut missing: Vec<String> = what.iter().filter(|t| !have(t)).map(|t| t.to_string()).collect();
    if headers && !Path::new("/usr/include/rdma/fabric.h").exists() {
        missing.push("libfabric headers (libfabric-dev)".into());
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("needs {}", missing.join(", "));
    assert!(std::env::var("RDM4_REQUIRE_FI").as_deref() != Ok("1"), "{msg}");
    eprintln!("SKIPPED: {msg}");
    false
}

/// The directory holding `librdm4-fi.so`, built once per test binary.
fn provider_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = env().out.join("fi");
        let status = Command::new("make")
            .args(["-s", "-C"])
            .arg(Path::new(MANIFEST_DIR).join("fi"))
            .arg(format!("OUT={}", out.display()))
            .arg(format!("RDM4_A={}", env().static_lib.display()))
            .status()
            .expect("run make");
        assert!(status.success(), "make -C fi failed");
        out
    })
}

/// A command with the provider on libfabric's path and a private shm prefix.
fn fi_cmd(prog: &str) -> Command {
    let mut c = Command::new(prog);
    c.env("FI_PROVIDER_PATH", provider_dir()).env("RDM4_SHM_PREFIX", format!("fiprov{}", std::process::id()));
    c
}

fn run(mut c: Command, limit: Duration, what: &str) -> Output {
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    wait_for(child, limit, what)
}

/// A child killed when dropped (a failing test ends no process it did not start).
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits for `child` at most `limit` (then kills it and fails).
fn wait_for(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: killed after {limit:?}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn fi_info_lists_the_provider_with_its_attributes() {
    if !needs(&["fi_info", "make", "cc"], true) {
        return;
    }
    let mut c = fi_cmd("fi_info");
    c.arg("-l");
    let o = run(c, Duration::from_secs(30), "fi_info -l");
    assert!(o.status.success() && text(&o).contains("rdm4:"), "fi_info -l does not show rdm4:\n{}", text(&o));

    let mut c = fi_cmd("fi_info");
    c.args(["-p", "rdm4", "-v"]);
    let o = run(c, Duration::from_secs(30), "fi_info -p rdm4 -v");
    let t = text(&o);
    assert!(o.status.success(), "fi_info -p rdm4 failed:\n{t}");
    // One entry per device, the default (auto) first.
    let domains: Vec<&str> = t
        .lines()
        .filter_map(|l| l.trim().strip_prefix("name: "))
        .filter(|n| ["auto", "shm", "udp"].contains(n))
        .collect();
    assert_eq!(domains.first(), Some(&"auto"), "the default device comes first:\n{t}");
    for dev in ["shm", "udp"] {
        assert!(domains.contains(&dev), "no {dev} domain:\n{t}");
    }
    for want in [
        "FI_EP_RDM",
        "FI_PROTO_EFA",
        "FI_TAGGED",
        "FI_RMA",
        "FI_ATOMIC",
        "FI_DIRECTED_RECV",
        "FI_SOURCE",
        "FI_COMPLETION",
        "FI_MR_PROV_KEY",
        "FI_MR_VIRT_ADDR",
        "FI_ORDER_SAS",
        "max_msg_size: 140737488355328",
        "cq_data_size: 8",
        "inject_size: 65536",
    ] {
        assert!(t.contains(want), "fi_info -p rdm4 -v lacks {want}:\n{t}");
    }

    // Only RDM: libfabric stacks no utility provider on rdm4.
    for ep in ["msg", "dgram"] {
        let mut c = fi_cmd("fi_info");
        c.args(["-p", "rdm4", "-t", &format!("FI_EP_{}", ep.to_uppercase())]);
        let o = run(c, Duration::from_secs(30), "fi_info -t");
        assert!(!text(&o).contains("provider: rdm4"), "an {ep} endpoint is offered:\n{}", text(&o));
    }

    // Parameters.
    let mut c = fi_cmd("fi_info");
    c.args(["-p", "rdm4", "-e"]);
    let o = run(c, Duration::from_secs(30), "fi_info -e");
    let t = text(&o);
    for var in ["FI_RDM4_DEVICE", "FI_RDM4_RESOLVE_MS", "FI_RDM4_UDP_ADDR", "FI_RDM4_TIMEOUT_MS"] {
        assert!(t.contains(var), "fi_info -e lacks {var}:\n{t}");
    }
}

/// Runs an fi_pingpong server and client (`wrap` prefixes each command:
/// namespace entry), both with `args`, the client towards `server`; checks
/// that both finish and the client reports every size.
fn pingpong(wrap: [&[&str]; 2], server: &str, port: u16, args: &[&str], what: &str) {
    let cmd = |w: &[&str], extra: &[&str], port_flag: &str| {
        let mut c = fi_cmd(w.first().copied().unwrap_or("fi_pingpong"));
        if !w.is_empty() {
            c.args(&w[1..]).arg("fi_pingpong");
        }
        c.args(["-p", "rdm4", "-e", "rdm", "-c", port_flag, &port.to_string()]).args(args).args(extra);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let mut srv = Reaped(Some(cmd(wrap[0], &[], "-B").spawn().expect("start fi_pingpong server")));
    // The server listens on its control port; the client retries its
    // connection for a while by itself only when told to, so give the
    // server a moment.
    std::thread::sleep(Duration::from_millis(500));
    let cli = cmd(wrap[1], &[server], "-P").spawn().expect("start fi_pingpong client");
    let c = wait_for(cli, Duration::from_secs(120), &format!("{what}: client"));
    let s = wait_for(srv.0.take().unwrap(), Duration::from_secs(30), &format!("{what}: server"));
    assert!(c.status.success() && s.status.success(), "{what}:\nclient:\n{}\nserver:\n{}", text(&c), text(&s));
    let t = text(&c);
    let sizes: Vec<&str> =
        t.lines().skip_while(|l| !l.starts_with("bytes")).skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    let want: &[&str] = if args.contains(&"-S") { &["1"] } else { &["64", "256", "1k", "4k", "64k", "1m"] };
    assert_eq!(sizes, want, "{what}: sizes reported:\n{t}");
    eprintln!("{what}:\n{t}");
}

#[test]
fn fi_pingpong_on_one_host_over_every_domain() {
    if !needs(&["fi_pingpong", "make", "cc"], true) {
        return;
    }
    let port = 47000 + (std::process::id() % 500) as u16;
    for mode in ["msg", "tagged"] {
        for (i, dom) in ["auto", "shm", "udp"].iter().enumerate() {
            let args = ["-m", mode, "-d", dom, "-I", "100"];
            pingpong([&[], &[]], "127.0.0.1", port + i as u16, &args, &format!("fi_pingpong {mode} {dom}"));
        }
        pingpong([&[], &[]], "127.0.0.1", port + 3, &["-m", mode, "-S", "1", "-I", "100"], &format!("{mode} 1 B"));
    }
}

#[test]
fn fi_pingpong_across_two_namespaces() {
    if !needs(&["fi_pingpong", "make", "cc", "ip"], true) {
        return;
    }
    let Some(hosts) = Netns::pair("fp", "10.78.0", 1500) else {
        assert!(std::env::var("RDM4_REQUIRE_FI").as_deref() != Ok("1"), "cannot make network namespaces");
        eprintln!("SKIPPED: cannot make network namespaces");
        return;
    };
    let port = 47600 + (std::process::id() % 300) as u16;
    // Each "host" gets a /dev/shm of its own (ip netns exec gives the
    // process a mount namespace), so that auto must reach the other by udp.
    let own_shm = "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\"";
    let a: Vec<&str> = vec!["ip", "netns", "exec", &hosts.ns[0], "sh", "-c", own_shm];
    let b: Vec<&str> = vec!["ip", "netns", "exec", &hosts.ns[1], "sh", "-c", own_shm];
    for mode in ["msg", "tagged"] {
        for (i, dom) in ["auto", "udp"].iter().enumerate() {
            let args = ["-m", mode, "-d", dom, "-I", "100"];
            pingpong([&a, &b], "10.78.0.1", port + i as u16, &args, &format!("netns fi_pingpong {mode} {dom}"));
        }
    }
}

/// `fi/tests/mpi_check.c` built with `mpicc` (once).
fn mpi_check() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let exe = env().out.join("fi").join("mpi_check");
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        let status = Command::new("mpicc")
            .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(Path::new(MANIFEST_DIR).join("fi/tests/mpi_check.c"))
            .status()
            .expect("run mpicc");
        assert!(status.success(), "mpicc fi/tests/mpi_check.c failed");
        exe
    })
}

/// Open MPI's options for the cm pml over `mtl ofi` on rdm4 (the ofi btl,
/// which opens at MPI_Init whatever pml runs, is left out; one-sided
/// communication over osc pt2pt).
const MTL_RDM4: &[&str] = &[
    "--mca",
    "pml",
    "cm",
    "--mca",
    "mtl",
    "ofi",
    "--mca",
    "mtl_ofi_provider_include",
    "rdm4",
    "--mca",
    "btl",
    "^ofi",
    "--mca",
    "osc",
    "pt2pt",
];

fn expect_all_checks(o: &Output, what: &str) {
    let t = text(o);
    assert!(
        o.status.success() && t.contains("mpi_check: all") && !t.contains("FAIL"),
        "{what}: mpi_check failed ({}):\n{t}",
        o.status
    );
    eprintln!("{what}:\n{t}");
}

#[test]
fn open_mpi_over_mtl_ofi_on_one_host() {
    if !needs(&["mpirun", "mpicc", "make", "cc"], true) {
        return;
    }
    // Every device: the default (auto), then each pinned by FI_RDM4_DEVICE.
    for dev in ["auto", "shm", "udp"] {
        let mut c = fi_cmd("mpirun");
        c.args(["--allow-run-as-root", "--oversubscribe", "-np", "4", "-x", "FI_RDM4_DEVICE"])
            .args(MTL_RDM4)
            .arg(mpi_check())
            .env("FI_RDM4_DEVICE", dev);
        let o = run(c, Duration::from_secs(300), &format!("mpirun -np 4 mpi_check over {dev}"));
        expect_all_checks(&o, &format!("Open MPI, mtl ofi on rdm4, one host, {dev}"));
    }
}

#[test]
fn open_mpi_over_mtl_ofi_across_two_namespaces() {
    if !needs(&["mpirun", "mpicc", "make", "cc", "ip", "unshare"], true) {
        return;
    }
    let mut c = fi_cmd(&format!("{MANIFEST_DIR}/scripts/mpi_netns.sh"));
    c.args(MTL_RDM4).arg("--").arg(mpi_check()).env("MPI_NETNS_TIMEOUT", "240");
    let o = run(c, Duration::from_secs(300), "scripts/mpi_netns.sh mpi_check");
    expect_all_checks(&o, "Open MPI, mtl ofi on rdm4, two ranks on each of two hosts");
}

/// `fi/tests/fi_check.c` built against libfabric (once).
fn fi_check() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let exe = env().out.join("fi").join("fi_check");
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        let status = Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-o"])
            .arg(&exe)
            .arg(Path::new(MANIFEST_DIR).join("fi/tests/fi_check.c"))
            .arg("-lfabric")
            .status()
            .expect("run cc");
        assert!(status.success(), "cc fi/tests/fi_check.c failed");
        exe
    })
}

#[test]
fn the_libfabric_api_on_every_domain() {
    if !needs(&["make", "cc"], true) {
        return;
    }
    for dom in ["auto", "shm", "udp"] {
        let mut c = fi_cmd(fi_check().to_str().unwrap());
        c.arg(dom).env("RDM4_UDP_ADDR", "127.0.0.1");
        let o = run(c, Duration::from_secs(150), &format!("fi_check {dom}"));
        let t = text(&o);
        assert!(o.status.success() && t.contains(", 0 failed"), "fi_check {dom} failed ({}):\n{t}", o.status);
        eprintln!("{}", t.lines().last().unwrap_or(""));
    }
}

#[test]
fn the_libfabric_api_under_valgrind() {
    if !needs(&["make", "cc", "valgrind"], true) {
        return;
    }
    let mut c = fi_cmd("valgrind");
    c.args(["--leak-check=full", "--errors-for-leak-kinds=definite", "--error-exitcode=1", "-q"])
        .arg(fi_check())
        .arg("auto")
        .env("FI_CHECK_ALARM", "400");
    let o = run(c, Duration::from_secs(450), "valgrind fi_check auto");
    let t = text(&o);
    assert!(o.status.success() && t.contains(", 0 failed"), "valgrind fi_check auto ({}):\n{t}", o.status);
}

/// One-sided MPI over `osc rdma` on `btl ofi` on rdm4 (RMA and fetching
/// atomics of the provider), with two ranks on each of two hosts. Rank 0
/// stays out of Compare_and_swap on its own window (`--no-self-cas`):
/// Open MPI 4.1.4's osc rdma hands btl ofi no registration for a rank's
/// own memory there (a NULL dereference in `mca_btl_ofi_acswap`), and on
/// one host none for any peer's, so this runs across hosts only.
#[test]
fn open_mpi_one_sided_over_btl_ofi_across_two_namespaces() {
    if !needs(&["mpirun", "mpicc", "make", "cc", "ip", "unshare"], true) {
        return;
    }
    let mut c = fi_cmd(&format!("{MANIFEST_DIR}/scripts/mpi_netns.sh"));
    c.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "rdm4"])
        .args(["--mca", "btl", "self,ofi", "--mca", "btl_ofi_provider_include", "rdm4", "--mca", "osc", "rdma"])
        .arg("--")
        .arg(mpi_check())
        .arg("--no-self-cas")
        .env("MPI_NETNS_TIMEOUT", "240");
    let o = run(c, Duration::from_secs(300), "scripts/mpi_netns.sh mpi_check, osc rdma");
    expect_all_checks(&o, "Open MPI, osc rdma over btl ofi on rdm4, two hosts");
}
