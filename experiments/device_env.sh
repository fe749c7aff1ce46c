# The GPU machine's environment for the scripts in experiments/ (sourced from the repository root, once per call:
# the scripts that source it export HYBRIDSD_ENV_READY, and a script they start skips it):
#   - the wheels in .whl/ (rapidfuzz for the machine's Python, which its image lacks) installed once per machine
#     into $DEVICE_TMP/site (DEVICE_TMP: default /tmp) and put first on PYTHONPATH, with the repository;
#   - the data sets carried in .cache/ (code_edits_dev.jsonl.xz or .gz, mt_bench and editeval .gz) unpacked into
#     $DEVICE_TMP/d, which becomes HYBRIDSD_DATA; without .cache/ it is ../shared/data (else /work/shared/data).
# Every python3 the sourcing script runs afterwards, inside train_zoo_gpu.sh or not, sees both.
# Returns 1 (with one line) when the wheels do not install or a carried data file does not unpack.
if [ -z "${HYBRIDSD_ENV_READY:-}" ]; then
  HYBRIDSD_SITE=${DEVICE_TMP:-/tmp}/site
  if ls .whl/*.whl >/dev/null 2>&1; then
    mkdir -p "$HYBRIDSD_SITE"
    # one install per machine (two stage lists may start at once, one per GPU): the first to take the lock installs
    ( flock 9; [ -f "$HYBRIDSD_SITE/.done" ] || { python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --target "$HYBRIDSD_SITE" .whl/*.whl && touch "$HYBRIDSD_SITE/.done"; } ) \
      9>"$HYBRIDSD_SITE.lock" || { echo "device_env.sh: the wheels in .whl/ did not install" >&2; return 1; }
  fi
  if ls .cache/code_edits_dev.jsonl.* >/dev/null 2>&1; then
    HYBRIDSD_DATA=${DEVICE_TMP:-/tmp}/d
    mkdir -p "$HYBRIDSD_DATA"
    edits=.cache/code_edits_dev.jsonl.xz; [ -f "$edits" ] || edits=.cache/code_edits_dev.jsonl.gz
    for f in "$edits" .cache/mt_bench.jsonl.gz .cache/editeval.jsonl.gz; do
      [ -f "$f" ] || continue
      name=$(basename "${f%.*}")  # without .xz / .gz; written whole or not at all
      python3 -c "import gzip, lzma, shutil, sys; o = lzma.open if sys.argv[1].endswith('.xz') else gzip.open; \
shutil.copyfileobj(o(sys.argv[1]), sys.stdout.buffer)" "$f" > "$HYBRIDSD_DATA/$name.part" 2>/dev/null \
        && mv "$HYBRIDSD_DATA/$name.part" "$HYBRIDSD_DATA/$name" \
        || { rm -f "$HYBRIDSD_DATA/$name.part"; echo "device_env.sh: $f does not unpack" >&2; return 1; }
    done
  else
    HYBRIDSD_DATA=$(cd .. && pwd)/shared/data
    [ -f "$HYBRIDSD_DATA/code_edits_dev.jsonl" ] || HYBRIDSD_DATA=/work/shared/data
  fi
  export PYTHONPATH="$HYBRIDSD_SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" HYBRIDSD_DATA HYBRIDSD_ENV_READY=1
  unset HYBRIDSD_SITE edits name f
fi
