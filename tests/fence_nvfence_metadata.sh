#!/bin/sh
# fence_nvfence's metadata against the RelaxNG schema that Debian's
# fence-agents package ships (fetched here with apt-get download, cached, never
# committed) and against the golden copy in tests/fence_nvfence/metadata.xml.
# Usage: fence_nvfence_metadata.sh FENCE_NVFENCE GOLDEN
# NVFENCE_METADATA_RNG=FILE: that schema instead (a machine without apt
# lists or network: the lab's guest, given the host's cached copy).
set -eu
bin=$1
golden=$2
command -v xmllint >/dev/null || { echo "FAIL: xmllint missing (scripts/setup.sh installs libxml2-utils)"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${NVFENCE_METADATA_RNG:-}" ]; then
  rng=$NVFENCE_METADATA_RNG
  [ -s "$rng" ] || { echo "FAIL: NVFENCE_METADATA_RNG=$rng: no such schema file"; exit 1; }
  ver="(NVFENCE_METADATA_RNG)"
else
  ver=$(apt-cache policy fence-agents 2>/dev/null | awk '/Candidate:/ {print $2}')
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || { echo "FAIL: apt knows no fence-agents package (run apt-get update)"; exit 1; }
  cache=${NVFENCE_LAB_CACHE:-/var/cache/nvfence-lab}/fence-agents/$ver
  if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache=${TMPDIR:-/tmp}/nvfence-fence-agents-$(id -u)/$ver
    mkdir -p "$cache"
  fi
  rng=$cache/metadata.rng
fi
if [ ! -s "$rng" ]; then
  (cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "fence-agents=$ver") \
    || { echo "FAIL: apt-get download fence-agents=$ver failed"; exit 1; }
  dpkg-deb -x "$work"/fence-agents_*.deb "$work/x"
  cp "$work/x/usr/share/cluster/relaxng/metadata.rng" "$rng.tmp" && mv "$rng.tmp" "$rng"
fi
echo "schema: $rng (fence-agents $ver)"

"$bin" -o metadata > "$work/argv.xml"
printf 'action=metadata\n' | "$bin" > "$work/stdin.xml"
xmllint --noout --relaxng "$rng" "$work/argv.xml"
cmp "$work/argv.xml" "$work/stdin.xml" || { echo "FAIL: metadata differs between argv and stdin"; exit 1; }
diff -u "$golden" "$work/argv.xml" || { echo "FAIL: metadata differs from the golden copy $golden"; exit 1; }

# The schema check must be able to fail: a parameter without its required
# attribute is refused.
sed 's/<parameter name="action" unique="0" required="1">/<parameter name="action" unique="0">/' "$work/argv.xml" > "$work/bad.xml"
cmp -s "$work/argv.xml" "$work/bad.xml" && { echo "FAIL: the check's edit did not apply (action is no longer required?)"; exit 1; }
if xmllint --noout --relaxng "$rng" "$work/bad.xml" 2>/dev/null; then
  echo "FAIL: the schema accepted metadata without a required attribute"; exit 1
fi
echo "ok: metadata valid, equal to the golden copy, same from argv and stdin"
