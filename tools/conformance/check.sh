#!/usr/bin/env bash
# Regenerates the header-conformance fixtures from the installed Debian headers and
# compares them with the committed ones in hw/conformance/ (comment lines ignored).
# Also runs the generator's self-test (its layout engine and constant evaluator
# against gcc). Exits non-zero on any difference.
#
# Needs: python3, gcc, libibverbs-dev, linux-headers-<version>-common (the newest
# installed one is used). See hw/conformance/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

fixtures=hw/conformance
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "conformance: self-test of the generator against gcc"
python3 tools/conformance/gen.py --selftest

echo "conformance: regenerating fixtures into $tmp"
python3 tools/conformance/gen.py --out "$tmp"

status=0
for f in mlx5_ifc.txt device.txt qp.txt cq.txt doorbell.txt mlx5dv.txt; do
  if [ ! -f "$fixtures/$f" ]; then
    echo "conformance: $fixtures/$f is missing (regenerate with: tools/conformance/gen.py --out $fixtures)"
    status=1
    continue
  fi
  grep -v '^#' "$fixtures/$f" >"$tmp/$f.committed" || true
  grep -v '^#' "$tmp/$f" >"$tmp/$f.fresh" || true
  if ! diff -u --label "committed $fixtures/$f" --label "regenerated $f" \
      "$tmp/$f.committed" "$tmp/$f.fresh" >"$tmp/$f.diff"; then
    n=$(grep -c '^[-+][^-+]' "$tmp/$f.diff" || true)
    echo "conformance: $f differs from the installed headers ($n lines):"
    head -n 200 "$tmp/$f.diff"
    status=1
  else
    echo "conformance: $f matches ($(wc -l <"$tmp/$f.fresh") entries)"
  fi
done
for f in "$fixtures"/*.txt; do
  case "$(basename "$f")" in
    mlx5_ifc.txt|device.txt|qp.txt|cq.txt|doorbell.txt|mlx5dv.txt) ;;
    *) echo "conformance: unexpected fixture $f (not produced by gen.py)"; status=1 ;;
  esac
done

if [ "$status" -ne 0 ]; then
  echo "conformance: FAILED: the committed fixtures differ from the headers installed here."
  echo "  If the header change is intended, regenerate: python3 tools/conformance/gen.py --out $fixtures"
  echo "  and review what the Rust layouts must follow (cargo test -p ferroverbs-hw --test conformance)."
  exit 1
fi
echo "conformance: all fixtures match the installed headers"
