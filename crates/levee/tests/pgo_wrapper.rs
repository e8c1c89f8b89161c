//! The workspace's compiler wrapper (`scripts/rustc-pgo`, named by
//! `.cargo/config.toml`): a compiler call at opt-level 3 gets the committed
//! profile, every other call runs as cargo gave it. Each case runs the
//! real script, copied into a scratch tree with its own `pgo/`, in front of
//! a stand-in compiler that prints the arguments it was given.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch tree: `scripts/rustc-pgo` (the real one), `pgo/` with a
/// profile made by LLVM `profile_llvm` (none when `None`), and `rustc`, a
/// stand-in that answers `-vV` as LLVM `llvm` and otherwise prints each
/// argument on a line.
struct Tree {
    dir: PathBuf,
}

impl Tree {
    fn new(name: &str, profile_llvm: Option<u32>, llvm: u32) -> Tree {
        let dir = std::env::temp_dir().join(format!("levee-pgo-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("scripts")).expect("scratch dir");
        std::fs::copy(
            workspace().join("scripts/rustc-pgo"),
            dir.join("scripts/rustc-pgo"),
        )
        .expect("copy the wrapper");
        if let Some(v) = profile_llvm {
            std::fs::create_dir_all(dir.join("pgo")).expect("pgo dir");
            std::fs::write(dir.join("pgo/levee.profdata"), b"profile").expect("profile");
            std::fs::write(dir.join("pgo/llvm-version"), format!("{v}\n")).expect("version");
        }
        let rustc = format!(
            "#!/usr/bin/env bash\nif [ \"$1\" = -vV ]; then printf 'rustc 1.95.0\\nLLVM version: {llvm}.1.2\\n'; exit 0; fi\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"
        );
        std::fs::write(dir.join("rustc"), rustc).expect("stand-in compiler");
        for f in ["rustc", "scripts/rustc-pgo"] {
            let ok = Command::new("chmod")
                .arg("+x")
                .arg(dir.join(f))
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chmod +x {f}");
        }
        Tree { dir }
    }

    /// The arguments the stand-in compiler got when cargo called the
    /// wrapper with `args` (and `env`).
    fn call(&self, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
        let out = Command::new(self.dir.join("scripts/rustc-pgo"))
            .arg(self.dir.join("rustc"))
            .args(args)
            .env_remove("LEVEE_PGO")
            .envs(env.iter().copied())
            .output()
            .expect("run the wrapper");
        assert!(out.status.success(), "wrapper failed: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn profile_flag(&self) -> String {
        format!("-Cprofile-use={}/pgo/levee.profdata", self.dir.display())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const RELEASE: &[&str] = &[
    "--crate-name",
    "levee_gateway",
    "--edition=2021",
    "src/lib.rs",
    "-C",
    "opt-level=3",
    "-C",
    "lto",
    "-C",
    "codegen-units=1",
];

#[test]
fn a_release_compile_gets_the_profile_and_keeps_every_argument() {
    let t = Tree::new("release", Some(22), 22);
    let got = t.call(RELEASE, &[]);
    let mut want: Vec<String> = RELEASE.iter().map(|s| s.to_string()).collect();
    want.push(t.profile_flag());
    assert_eq!(got, want);
    let joined = t.call(&["--crate-name", "x", "-Copt-level=3"], &[]);
    assert_eq!(joined.last(), Some(&t.profile_flag()), "{joined:?}");
}

#[test]
fn debug_test_and_query_calls_run_unchanged() {
    let t = Tree::new("debug", Some(22), 22);
    for args in [
        &["--crate-name", "x", "-C", "opt-level=1"][..],
        &["--crate-name", "x", "-C", "debuginfo=2"][..],
        &[
            "--crate-name",
            "x",
            "-C",
            "opt-level=0",
            "--cfg",
            "opt-level=3",
        ][..],
        &["-", "--print=cfg", "--crate-type", "bin"][..],
    ] {
        assert_eq!(t.call(args, &[]), args.to_vec(), "{args:?}");
    }
    assert_eq!(
        t.call(&["-vV"], &[]),
        ["rustc 1.95.0", "LLVM version: 22.1.2"]
    );
}

#[test]
fn a_compile_that_names_a_profile_or_opts_out_runs_unchanged() {
    let t = Tree::new("named", Some(22), 22);
    let generate = ["-C", "opt-level=3", "-Cprofile-generate=/tmp/raw"];
    assert_eq!(t.call(&generate, &[]), generate.to_vec());
    let used = ["-Cprofile-use=/elsewhere.profdata", "-C", "opt-level=3"];
    assert_eq!(t.call(&used, &[]), used.to_vec());
    for off in ["0", "off", "false"] {
        let got = t.call(RELEASE, &[("LEVEE_PGO", off)]);
        assert_eq!(got, RELEASE.to_vec(), "LEVEE_PGO={off}");
    }
}

#[test]
fn no_profile_or_an_older_llvm_than_the_profiles_builds_without_one() {
    let none = Tree::new("none", None, 22);
    assert_eq!(none.call(RELEASE, &[]), RELEASE.to_vec());
    let older = Tree::new("older", Some(22), 21);
    assert_eq!(older.call(RELEASE, &[]), RELEASE.to_vec());
    let newer = Tree::new("newer", Some(22), 23);
    assert_eq!(newer.call(RELEASE, &[]).last(), Some(&newer.profile_flag()));
}

#[test]
fn the_workspace_names_the_wrapper_and_commits_a_profile() {
    let ws = workspace();
    let config =
        std::fs::read_to_string(ws.join(".cargo/config.toml")).expect(".cargo/config.toml");
    assert!(
        config.contains("rustc-wrapper = \"scripts/rustc-pgo\""),
        ".cargo/config.toml must name scripts/rustc-pgo as build.rustc-wrapper"
    );
    let profile = std::fs::metadata(ws.join("pgo/levee.profdata")).expect("pgo/levee.profdata");
    assert!(
        profile.len() > 100_000,
        "pgo/levee.profdata is {} bytes",
        profile.len()
    );
    let version = std::fs::read_to_string(ws.join("pgo/llvm-version")).expect("pgo/llvm-version");
    assert!(
        version.trim().parse::<u32>().is_ok_and(|v| v >= 18),
        "pgo/llvm-version must hold an LLVM major version, not {version:?}"
    );
}

/// Compiles a one-function library at opt-level 3 with `profile`; the
/// compiler's complaint, if it has one. A profile it cannot read is a
/// warning to rustc, not an error: the build goes on without it.
fn compile_with_profile(name: &str, profile: &Path) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("levee-pgo-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join("lib.rs");
    std::fs::write(&src, "pub fn twice(x: u32) -> u32 { x.wrapping_mul(2) }\n")
        .map_err(|e| e.to_string())?;
    let out = Command::new("rustc")
        .args([
            "--crate-type",
            "lib",
            "--edition",
            "2021",
            "-C",
            "opt-level=3",
        ])
        .arg(format!("-Cprofile-use={}", profile.display()))
        .arg("--out-dir")
        .arg(&dir)
        .arg(&src)
        .output()
        .map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    let said = String::from_utf8_lossy(&out.stderr);
    if out.status.success() && !said.contains("warning") {
        Ok(())
    } else {
        Err(said.into_owned())
    }
}

#[test]
fn this_compiler_reads_the_committed_profile() {
    let committed = workspace().join("pgo/levee.profdata");
    if let Err(e) = compile_with_profile("reads", &committed) {
        panic!("rustc cannot use pgo/levee.profdata (make it anew with scripts/build-pgo): {e}");
    }
    // And a file that is no profile draws a complaint, so the check above
    // can fail.
    let bogus =
        std::env::temp_dir().join(format!("levee-pgo-{}-bogus.profdata", std::process::id()));
    std::fs::write(&bogus, b"not a profile").expect("write");
    let refused = compile_with_profile("bogus", &bogus);
    let _ = std::fs::remove_file(&bogus);
    assert!(refused.is_err(), "rustc took a file that is no profile");
}
