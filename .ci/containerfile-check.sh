#!/usr/bin/env bash
# .ci/containerfile-check.sh [BINARY]: checks the Containerfile (or $CONTAINERFILE) without building it (no
# base-image registry is reachable here, and no linter such as hadolint is installed):
#   - its structure: a named build stage and a runtime stage, base images named with their
#     registry and a version tag, the Rust toolchain at least Cargo.toml's rust-version, the
#     production `cargo build`, no ADD of URLs, a non-root USER, EXPOSE 9511, the entrypoint,
#     COPY sources that exist and that .dockerignore lets into the build context, and a runtime
#     stage that installs nothing but ca-certificates;
#   - that the runtime stage can run the binary: every library BINARY (default: the release or
#     debug binary cargo already built, `ldd`) links against is one debian:bookworm-slim ships.
#     That binary is a development build of this checkout on this machine, not the image's.
# Prints one line per check; exits 1 if any fails.
set -euo pipefail
cd "$(dirname "$0")/.."

file=${CONTAINERFILE:-Containerfile}
failed=0
ok() { printf '  ok: %s\n' "$*"; }
bad() {
  printf '  FAILED: %s\n' "$*"
  failed=1
}

[[ -f $file ]] || {
  echo "no $file"
  exit 1
}

# One instruction per element: comment lines dropped (also inside continuations, as the
# builders do), continuation lines joined.
mapfile -t instructions < <(awk '
  /^[[:space:]]*#/ { next }
  { line = line (cont ? " " : "") $0 }
  /\\[[:space:]]*$/ { sub(/\\[[:space:]]*$/, "", line); cont = 1; next }
  { cont = 0; if (line ~ /[^[:space:]]/) print line; line = "" }
' "$file")

stages=0 build_image="" runtime_image="" aliases=" " runtime_user="" runtime_expose=""
entrypoint="" cmd="" cargo_build="" install_lines=()
declare -a copies=()
for ins in "${instructions[@]}"; do
  read -r op args <<<"$ins"
  case ${op^^} in
    FROM)
      stages=$((stages + 1))
      read -r image as alias _ <<<"$args"
      if [[ $aliases == *" $image "* ]]; then
        bad "stage $stages starts FROM the stage '$image': the runtime stage must be a fresh base"
      elif [[ $image =~ ^[a-z0-9.-]+\.[a-z]+(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$ ]] \
        && [[ $image == *@sha256:* || (${image##*:} != latest && ${image##*:} == *[0-9]*) ]]; then
        ok "stage $stages base image $image is registry-qualified and pinned to a version"
      elif [[ $image =~ ^[a-z0-9.-]+\.[a-z]+(:[0-9]+)?/[a-z0-9._/-]+:[a-z]+-slim$ ]]; then
        # debian:<codename>-slim: the release is pinned, its security updates are not.
        ok "stage $stages base image $image is registry-qualified and pinned to a release"
      else
        bad "stage $stages base image '$image' must name its registry and a version tag (not latest)"
      fi
      if [[ ${as^^} == AS && -n ${alias:-} ]]; then
        aliases+="$alias "
      fi
      if ((stages == 1)); then
        build_image=$image
        [[ ${alias:-} == build ]] || bad "the first stage must be named 'build' (FROM … AS build)"
      else
        runtime_image=$image runtime_user="" runtime_expose="" entrypoint="" cmd=""
        install_lines=()
      fi
      ;;
    ADD)
      if [[ $args =~ (https?|ftp|git)://|git@ ]]; then
        bad "ADD of a URL: '$ins' (download in a RUN with a checksum, or COPY from the repository)"
      fi
      ;;
    COPY)
      if [[ $args != --from=* ]]; then
        copies+=("$args")
      fi
      ;;
    RUN)
      if [[ $args == *"cargo build"* ]]; then
        cargo_build=$args
      fi
      if ((stages > 1)) && [[ $args == *"apt-get install"* ]]; then
        install_lines+=("$args")
      fi
      ;;
    USER) ((stages > 1)) && runtime_user=$args ;;
    EXPOSE) ((stages > 1)) && runtime_expose+=" $args" ;;
    ENTRYPOINT) ((stages > 1)) && entrypoint=$args ;;
    CMD) ((stages > 1)) && cmd=$args ;;
  esac
done

if ((stages >= 2)); then
  ok "$stages stages (build → runtime)"
else
  bad "$stages stage(s): expected a build stage and a runtime stage"
fi
# The library check below is against what Debian's slim image ships.
if [[ $runtime_image == */debian:* && $runtime_image == *slim* ]]; then
  ok "runtime stage is Debian slim ($runtime_image)"
else
  bad "the runtime stage is not debian:*-slim ('$runtime_image'): the library check assumes it"
fi

# The toolchain: the rust image's version is at least Cargo.toml's rust-version.
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if [[ $build_image =~ /rust:([0-9]+\.[0-9]+(\.[0-9]+)?) ]]; then
  toolchain=${BASH_REMATCH[1]}
  if [[ $(printf '%s\n%s\n' "$msrv" "$toolchain" | sort -V | head -n1) == "$msrv" ]]; then
    ok "build stage Rust $toolchain ≥ rust-version $msrv"
  else
    bad "build stage Rust $toolchain is older than Cargo.toml's rust-version $msrv"
  fi
else
  bad "the build stage is not the official rust image with a version tag: '$build_image'"
fi

if [[ $cargo_build =~ cargo\ build\ --release\ --locked\ --no-default-features ]]; then
  ok "production build: cargo build --release --locked --no-default-features"
else
  bad "the build stage must run 'cargo build --release --locked --no-default-features'"
fi

case ${runtime_user%%:*} in
  "") bad "the runtime stage sets no USER (it would run as root)" ;;
  root | 0) bad "the runtime stage runs as root (USER $runtime_user)" ;;
  *[!0-9]*) bad "USER $runtime_user is not numeric (Kubernetes' runAsNonRoot cannot verify a name)" ;;
  *) ok "runs as USER $runtime_user" ;;
esac

if [[ " $runtime_expose " == *" 9511 "* || " $runtime_expose " == *" 9511/tcp "* ]]; then
  ok "EXPOSE 9511"
else
  bad "the runtime stage does not EXPOSE 9511"
fi

# ENTRYPOINT + CMD in exec form, together the service's start command.
exec_form() { sed -n 's/^\[\(.*\)\]$/\1/p' <<<"$1" | sed 's/", *"/ /g; s/^"//; s/"$//'; }
command_line="$(exec_form "$entrypoint") $(exec_form "$cmd")"
if [[ $command_line == "/usr/local/bin/magnum-capi serve --config /etc/magnum-capi/magnum-capi.toml" ]]; then
  ok "ENTRYPOINT + CMD: $command_line"
else
  bad "ENTRYPOINT + CMD (exec form) must run 'magnum-capi serve --config /etc/magnum-capi/magnum-capi.toml', not '$command_line'"
fi

# The runtime stage installs the CA bundle and nothing else.
if ((${#install_lines[@]} == 1)) \
  && [[ ${install_lines[0]} =~ apt-get\ install\ -y\ --no-install-recommends\ ca-certificates( |$) ]] \
  && [[ ! ${install_lines[0]} =~ --no-install-recommends\ ca-certificates\ +[a-z0-9] ]] \
  && [[ ${install_lines[0]} == *"rm -rf /var/lib/apt/lists/*"* ]]; then
  ok "runtime packages: ca-certificates only (no recommends, apt lists removed)"
else
  bad "the runtime stage must install exactly ca-certificates with --no-install-recommends and remove /var/lib/apt/lists"
fi

# COPY sources exist and .dockerignore (an allow-list) lets them into the build context.
allowed=()
if [[ -f .dockerignore ]]; then
  mapfile -t allowed < <(sed -n 's/^!\(.*\)$/\1/p' .dockerignore)
else
  bad "no .dockerignore: the build context would include target/"
fi
for copy in "${copies[@]}"; do
  read -r -a words <<<"$copy"
  # Every word but the destination (and --chown/--chmod options) is a source.
  for src in "${words[@]:0:${#words[@]}-1}"; do
    [[ $src == --* ]] && continue
    src=${src%/}
    if [[ ! -e $src ]]; then
      bad "COPY source '$src' does not exist in the repository"
      continue
    fi
    in_context=no
    for a in "${allowed[@]}"; do
      if [[ $src == "$a" || $src == "$a"/* ]]; then
        in_context=yes
      fi
    done
    if [[ $in_context == yes ]]; then
      ok "COPY source $src exists and is in the build context"
    else
      bad "COPY source '$src' is excluded by .dockerignore"
    fi
  done
done

# What the binary links against must be in debian:bookworm-slim: glibc's libraries (package
# libc6) and libgcc_s (libgcc-s1), both essential there. linux-vdso is the kernel's.
binary=${1:-}
if [[ -z $binary ]]; then
  target=${CARGO_TARGET_DIR:-target}
  for candidate in "$target/release/magnum-capi" "$target/debug/magnum-capi"; do
    if [[ -x $candidate ]]; then
      binary=$candidate
      break
    fi
  done
fi
if [[ -z $binary ]]; then
  echo "  skipped: no magnum-capi binary built yet, its libraries were not checked"
elif [[ ! -x $binary ]]; then
  bad "no executable $binary to check the libraries of"
elif ! command -v ldd >/dev/null 2>&1; then
  echo "  skipped: no ldd, the libraries of $binary were not checked"
else
  libs=$(ldd "$binary" 2>&1 || true)
  if [[ $libs == *"not a dynamic executable"* || $libs == *"statically linked"* ]]; then
    ok "$binary is statically linked"
  else
    found=() foreign=0
    while read -r lib _; do
      [[ -z $lib ]] && continue
      lib=${lib##*/}
      case $lib in
        linux-vdso.so.* | linux-gate.so.* | ld-linux*.so.* | libc.so.6 | libm.so.6 | libpthread.so.0 \
          | libdl.so.2 | librt.so.1 | libresolv.so.2 | libanl.so.1 | libutil.so.1 | libgcc_s.so.1)
          found+=("$lib")
          ;;
        *)
          bad "$binary links $lib, which debian:bookworm-slim does not ship"
          foreign=1
          ;;
      esac
    done <<<"$libs"
    if ((!foreign)); then
      ok "$binary links only ${found[*]}"
    fi
  fi
fi

if ((failed)); then
  echo "Containerfile check failed"
  exit 1
fi
echo "Containerfile check passed"
