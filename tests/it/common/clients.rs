//! The real Go clients of the client tests (`tests/clients/`): our gophercloud v2 program and the
//! Terraform OpenStack provider, built from their pinned Go modules by `tests/clients/build.sh`
//! (or found in its cache) once per test binary, and the machine's Terraform. Missing Go, a failed
//! build or a missing Terraform fails the tests that need them: they are never skipped.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static BUILD: OnceLock<PathBuf> = OnceLock::new();

/// The build directory: `bin/gophercloud-check`, `terraform-mirror/`, `BUILD` (blocking; call it
/// off the runtime, as [`built`] does).
pub fn build() -> &'static Path {
    BUILD.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/build.sh");
        super::realstack::go_build(&script, "client tests")
    })
}

/// [`build`] from async code.
pub async fn built() -> &'static Path {
    tokio::task::spawn_blocking(build)
        .await
        .expect("building the clients")
}

/// The machine's Terraform: `$MAGNUM_CAPI_TERRAFORM`, else `terraform` on `PATH`, else
/// `/usr/local/bin/terraform`. Its absence fails, saying what to install.
pub fn terraform() -> PathBuf {
    let candidates = std::env::var_os("MAGNUM_CAPI_TERRAFORM")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join("terraform"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .chain([PathBuf::from("/usr/local/bin/terraform")]);
    for c in candidates {
        if c.is_file() {
            return c;
        }
    }
    panic!(
        "Terraform is missing: the Terraform client test runs the machine's Terraform (v1.11.4 on \
         the CI machine). Install it at /usr/local/bin/terraform or point MAGNUM_CAPI_TERRAFORM \
         at it"
    )
}
