//! The command line: `--help` says what each command does and where its guide is; a wrong flag
//! and a missing setting are refused naming what to set.

use std::process::{Command, Output};

fn magnum_capi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(args)
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env_remove("MAGNUM_CAPI__DATABASE__URL")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_says_what_each_command_does_and_points_to_its_guide() {
    let out = magnum_capi(&["--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    assert!(help.contains("Magnum (container-infra) v1 API"), "{help}");
    assert!(help.contains("docs/"), "{help}");
    for (command, guide) in [
        ("serve", "docs/install.md"),
        ("migrate", "docs/operate.md"),
        ("check", "docs/operate.md"),
        ("import", "docs/moving-from-magnum.md"),
        ("management-clusters", "docs/install.md"),
        ("api-proxy", "docs/private-clusters.md"),
        ("cluster", "docs/delete-cleanup.md"),
        ("render", "docs/architecture.md"),
    ] {
        assert!(help.contains(command), "{command} is not listed:\n{help}");
        let out = magnum_capi(&[command, "--help"]);
        assert!(out.status.success(), "{command} --help: {}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains(guide),
            "{command} --help names no {guide}:\n{text}"
        );
        let page = concat!(env!("CARGO_MANIFEST_DIR"), "/");
        assert!(
            std::path::Path::new(&format!("{page}{guide}")).exists(),
            "{guide} does not exist"
        );
    }
    let out = magnum_capi(&["config", "sample", "--help"]);
    assert!(stdout(&out).contains("etc/magnum-capi.toml.example"));
}

#[test]
fn a_wrong_flag_is_refused_naming_it() {
    let out = magnum_capi(&["serve", "--devv"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("unexpected argument '--devv'"), "{err}");
    assert!(err.contains("--dev"), "the likely flag is suggested: {err}");
}

#[test]
fn a_missing_database_url_names_the_key_and_the_variable() {
    let out = magnum_capi(&["migrate"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("[database] url is required"), "{err}");
    assert!(err.contains("MAGNUM_CAPI__DATABASE__URL"), "{err}");
}

#[test]
fn a_missing_seal_key_names_the_keys_to_set() {
    let out = Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(["serve"])
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env(
            "MAGNUM_CAPI__DATABASE__URL",
            "postgres://nobody@127.0.0.1:1/none",
        )
        .env("MAGNUM_CAPI__HTTP__BIND", "127.0.0.1:0")
        .env("MAGNUM_CAPI__KEYSTONE__AUTH_URL", "http://127.0.0.1:1/v3")
        .env("MAGNUM_CAPI__KEYSTONE__USERNAME", "magnum")
        .env("MAGNUM_CAPI__KEYSTONE__PASSWORD", "secret")
        .env("MAGNUM_CAPI__KEYSTONE__PROJECT_NAME", "service")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("[operations] seal_key or seal_key_file is required"),
        "{err}"
    );
}
