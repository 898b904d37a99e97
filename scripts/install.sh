#!/usr/bin/env bash
# Builds rdm4 and installs the C library into a prefix.
#
#   scripts/install.sh --prefix DIR [--no-build] [--libdir-from DIR]
#
# Installs
#
#   DIR/lib/librdm4.so.<major>.<minor>.<patch>   and the symlinks
#   DIR/lib/librdm4.so.<major> -> librdm4.so.<major>.<minor>.<patch>  (the soname)
#   DIR/lib/librdm4.so -> librdm4.so.<major>                          (for -lrdm4)
#   DIR/lib/librdm4.a
#   DIR/include/rdm4.h
#   DIR/lib/pkgconfig/rdm4.pc                    from pkgconfig/rdm4.pc.in
#   DIR/lib/pkgconfig/rdm4-static.pc             from pkgconfig/rdm4-static.pc.in
#                                                (links librdm4.a itself)
#   DIR/lib/cmake/rdm4/rdm4Config.cmake          from cmake/rdm4Config.cmake.in
#   DIR/lib/cmake/rdm4/rdm4ConfigVersion.cmake   from cmake/rdm4ConfigVersion.cmake.in
#   DIR/share/man/man7/rdm4.7                    from man/rdm4.7 (overview, environment)
#   DIR/share/man/man3/rdm4.3                    from man/rdm4.3 (the C API)
#   DIR/share/man/man1/rdm4-perf.1               from man/rdm4-perf.1 (the benchmark tool)
#   DIR/share/man/man1/rdm4-soak.1               from man/rdm4-soak.1 (the soak tool)
#   DIR/lib/libfabric/librdm4-fi.so             the libfabric provider rdm4 (fi/), built
#                                                by `make -C fi` where libfabric's headers
#                                                are installed (Debian: libfabric-dev);
#                                                load it with
#                                                FI_PROVIDER_PATH=DIR/lib/libfabric
#   DIR/share/man/man7/fi_rdm4.7                 from man/fi_rdm4.7 (the provider)
#   DIR/share/rdm4/wireshark/rdm4.lua            from tools/wireshark/rdm4.lua (the Wireshark
#                                                dissector of RDM4_PCAP captures: tshark -X
#                                                lua_script:FILE, or link it into
#                                                ~/.local/lib/wireshark/plugins/)
#
# Options:
#
#   --prefix DIR       where to install (required); a relative DIR is taken
#                      from the current directory.
#   --no-build         do not run `cargo build --release --lib`; install the
#                      libraries already in cargo's target/release/.
#   --no-provider      do not build and install the libfabric provider
#                      (it is skipped, with a note, where libfabric's
#                      headers are missing).
#   --libdir-from DIR  take librdm4.so and librdm4.a from DIR instead of
#                      target/release/ (implies --no-build). `cargo test`
#                      leaves fresh libraries only in target/<profile>/deps/
#                      (see tests/c_programs.rs), so tests/consumer.rs passes
#                      that directory.
#
# DESTDIR is honoured for staged installs: files go to $DESTDIR$PREFIX, while
# the paths written into rdm4.pc name $PREFIX.
#
# The version is read from Cargo.toml ([package] version), the only place it
# is set; the templates' @PLACEHOLDERS@ (the man pages' @VERSION@ too) are
# filled in here.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
    exit "${1:-2}"
}

die() {
    echo "install.sh: $*" >&2
    exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=
build=1
libs_from=
provider=1

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --no-build) build=0; shift ;;
        --no-provider) provider=0; shift ;;
        --libdir-from) [ $# -ge 2 ] || die "--libdir-from needs a directory"; libs_from=$2; build=0; shift 2 ;;
        --libdir-from=*) libs_from=${1#--libdir-from=}; build=0; shift ;;
        -h|--help) usage 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$prefix" ] || { echo "install.sh: --prefix DIR is required" >&2; usage; }
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
case "$prefix" in *[[:space:]]*) die "the prefix may not contain white space (rdm4.pc could not express it): '$prefix'" ;; esac

# --- the version, from Cargo.toml's [package] table ---------------------------
version=$(awk '
    /^\[/ { in_package = ($0 ~ /^\[package\][[:space:]]*$/) ; next }
    in_package && /^[[:space:]]*version[[:space:]]*=/ {
        sub(/^[^=]*=[[:space:]]*"/, ""); sub(/".*$/, ""); print; exit
    }' "$root/Cargo.toml")
[[ "$version" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] \
    || die "cannot read a MAJOR.MINOR.PATCH version from $root/Cargo.toml (got '$version')"
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} patch=${BASH_REMATCH[3]}
description=$(awk '
    /^\[/ { in_package = ($0 ~ /^\[package\][[:space:]]*$/) ; next }
    in_package && /^[[:space:]]*description[[:space:]]*=/ {
        sub(/^[^=]*=[[:space:]]*"/, ""); sub(/"[[:space:]]*$/, ""); print; exit
    }' "$root/Cargo.toml")
[ -n "$description" ] || description="EFA RDM protocol v4"

# What librdm4.a needs besides itself: `rustc --print native-static-libs` for
# the Rust standard library (the dependencies add no native code), less -lc,
# which every C compiler driver adds. Keep in step with NATIVE_STATIC_LIBS in
# tests/c_programs.rs.
native_libs=(gcc_s util rt pthread m dl)

# --- build, and find the libraries -------------------------------------------
libs_from_given=$libs_from
if [ -z "$libs_from" ]; then
    if [ "$build" = 1 ]; then
        echo "install.sh: cargo build --release --lib"
        (cd "$root" && cargo build --release --lib)
    fi
    # cargo's target directory (honours CARGO_TARGET_DIR and .cargo/config).
    target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps --offline 2>/dev/null \
        | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p') || true
    [ -n "${target_dir:-}" ] || target_dir=${CARGO_TARGET_DIR:-$root/target}
    libs_from=$target_dir/release
fi
so_src=$libs_from/librdm4.so
a_src=$libs_from/librdm4.a
for f in "$so_src" "$a_src"; do
    if [ ! -f "$f" ]; then
        if [ -n "$libs_from_given" ]; then die "$f not found (--libdir-from $libs_from)"; fi
        die "$f not found (run without --no-build, or run \`cargo build --release\` first)"
    fi
done
header_src=$root/include/rdm4.h
[ -f "$header_src" ] || die "$header_src not found"
# The man pages, each with the section it is installed in (its suffix).
man_pages=(rdm4.7 rdm4.3 rdm4-perf.1 rdm4-soak.1 fi_rdm4.7)
for page in "${man_pages[@]}"; do
    [ -f "$root/man/$page" ] || die "$root/man/$page not found"
done

# 4 or 8, from the ELF class of the shared library (byte 4: 1 = 32-bit, 2 = 64-bit).
case "$(od -An -tu1 -j4 -N1 "$so_src" | tr -d ' ')" in
    1) sizeof_void_p=4 ;;
    2) sizeof_void_p=8 ;;
    *) die "$so_src is not an ELF file" ;;
esac

# --- install -----------------------------------------------------------------
dest=${DESTDIR:-}$prefix
libdir=$dest/lib
includedir=$dest/include
pcdir=$libdir/pkgconfig
cmakedir=$libdir/cmake/rdm4
install -d "$libdir" "$includedir" "$pcdir" "$cmakedir"

real=librdm4.so.$major.$minor.$patch
soname=librdm4.so.$major
install -m 755 "$so_src" "$libdir/$real"
ln -sfn "$real" "$libdir/$soname"
ln -sfn "$soname" "$libdir/librdm4.so"
install -m 644 "$a_src" "$libdir/librdm4.a"
install -m 644 "$header_src" "$includedir/rdm4.h"

# Fills a template: every @NAME@ is replaced by the value given as
# RDM4_T_NAME=value (literally: no character of the value is special).
# Fails if a placeholder is left over.
fill() {
    local template=$1 out=$2
    shift 2
    local tmp
    tmp=$(mktemp "$out.XXXXXX")
    env "$@" awk '
        {
            line = $0
            out = ""
            while ((i = index(line, "@")) > 0) {
                rest = substr(line, i + 1)
                j = index(rest, "@")
                name = (j > 0) ? substr(rest, 1, j - 1) : ""
                if (name ~ /^[A-Z_][A-Z0-9_]*$/ && (("RDM4_T_" name) in ENVIRON)) {
                    out = out substr(line, 1, i - 1) ENVIRON["RDM4_T_" name]
                    line = substr(rest, j + 1)
                } else {
                    out = out substr(line, 1, i)
                    line = rest
                }
            }
            print out line
        }' "$template" >"$tmp"
    if grep -n '@[A-Z_][A-Z0-9_]*@' "$tmp" >&2; then
        rm -f "$tmp"
        die "$template: placeholders left unfilled (above)"
    fi
    chmod 644 "$tmp"
    mv -f "$tmp" "$out"
}

libs_private=$(printf -- '-l%s ' "${native_libs[@]}")
cmake_libs=$(IFS=';'; echo "${native_libs[*]}")

for pc in rdm4 rdm4-static; do
    fill "$root/pkgconfig/$pc.pc.in" "$pcdir/$pc.pc" \
        RDM4_T_PREFIX="$prefix" RDM4_T_VERSION="$version" RDM4_T_DESCRIPTION="$description" \
        RDM4_T_LIBS_PRIVATE="${libs_private% }"
done
fill "$root/cmake/rdm4Config.cmake.in" "$cmakedir/rdm4Config.cmake" \
    RDM4_T_VERSION="$version" RDM4_T_MAJOR="$major" RDM4_T_CMAKE_NATIVE_LIBS="$cmake_libs"
fill "$root/cmake/rdm4ConfigVersion.cmake.in" "$cmakedir/rdm4ConfigVersion.cmake" \
    RDM4_T_VERSION="$version" RDM4_T_MAJOR="$major" RDM4_T_MINOR="$minor" \
    RDM4_T_SIZEOF_VOID_P="$sizeof_void_p"

mandir=$dest/share/man
for page in "${man_pages[@]}"; do
    section=${page##*.}
    install -d "$mandir/man$section"
    fill "$root/man/$page" "$mandir/man$section/$page" RDM4_T_VERSION="$version"
done

if [ "$provider" = 1 ]; then
    if [ -e /usr/include/rdma/fabric.h ] || pkg-config --exists libfabric 2>/dev/null; then
        fi_out=$(mktemp -d)
        make -s -C "$root/fi" RDM4_A="$a_src" OUT="$fi_out" >&2 || { rm -rf "$fi_out"; die "make -C fi failed"; }
        install -d "$libdir/libfabric"
        install -m 755 "$fi_out/librdm4-fi.so" "$libdir/libfabric/librdm4-fi.so"
        rm -rf "$fi_out"
    else
        echo "install.sh: libfabric's headers are not installed: the provider (fi/) is not built" >&2
    fi
fi

install -d "$dest/share/rdm4/wireshark"
install -m 644 "$root/tools/wireshark/rdm4.lua" "$dest/share/rdm4/wireshark/rdm4.lua"

echo "install.sh: installed rdm4 $version into ${DESTDIR:+$DESTDIR}$prefix (libraries from $libs_from)"
