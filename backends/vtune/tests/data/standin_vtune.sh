#!/bin/bash
# A stand-in for Intel's `vtune` command, for tests on machines without
# VTune. It accepts exactly the command lines lotus documents, and fails on
# anything else:
#
#   vtune --version
#   vtune -collect TYPE -start-paused -result-dir D -- CMD [ARGS...]
#   vtune -report hotspots -result-dir D -format csv -csv-delimiter comma -report-output F
#
# -collect creates D (which must not exist), runs CMD with
# INTEL_LIBITTNOTIFY64 set to $VTUNE_STANDIN_COLLECTOR (a stand-in ITT
# collector that appends "resume"/"pause"/"detach" to $LOTUS_TEST_ITT_LOG,
# set here to D/itt.log) and exits with CMD's status.
#
# -report fails, as VTune does on an empty result, unless D/itt.log shows a
# resume; otherwise it copies a real report to F: $VTUNE_STANDIN_REPORT
# when set, else $VTUNE_STANDIN_REPORTS/<Op>/<n>.csv, where <Op> is the stem
# of CMD's --op-file argument ("(empty)" with --empty) and <n> counts the
# reports made for that op so far (state in $VTUNE_STANDIN_STATE).
#
# Every invocation is appended to $VTUNE_STANDIN_CALLS when set, one line
# per call, arguments separated by " | "; after each report, one more line
# "itt.log: | <call> | <call> ..." lists the ITT calls the collector saw.
#
# The report command does not get the target's environment: -collect saves
# VTUNE_STANDIN_REPORT and VTUNE_STANDIN_CALLS from it in D for -report.
set -u

die() {
    echo "vtune: error: $*" >&2
    exit 2
}

log_call() {
    [ -n "${VTUNE_STANDIN_CALLS-}" ] || return 0
    local line="" a
    for a in "$@"; do line="${line:+$line | }$a"; done
    printf '%s\n' "$line" >> "$VTUNE_STANDIN_CALLS"
}

case "${1-}" in
--version)
    log_call "$@"
    [ $# -eq 1 ] || die "unexpected arguments after --version: $*"
    echo "Intel(R) VTune(TM) Profiler 2025.0.0 (stand-in for lotus tests)"
    exit 0
    ;;
-collect)
    log_call "$@"
    [ $# -ge 7 ] || die "too few arguments for -collect: $*"
    type=$2
    case "$type" in "" | -*) die "-collect needs an analysis type, got '$type'" ;; esac
    [ "$3" = "-start-paused" ] || die "expected -start-paused, got '$3'"
    [ "$4" = "-result-dir" ] || die "expected -result-dir, got '$4'"
    dir=$5
    [ "$6" = "--" ] || die "expected -- before the target command, got '$6'"
    shift 6
    [ -e "$dir" ] && die "the result directory $dir already exists"
    mkdir -p "$dir" || die "cannot create $dir"
    : "${VTUNE_STANDIN_COLLECTOR:?the test must set VTUNE_STANDIN_COLLECTOR}"
    op=""
    prev=""
    for a in "$@"; do
        [ "$prev" = "--op-file" ] && op=$(basename "$a" .py)
        [ "$a" = "--empty" ] && op="(empty)"
        prev=$a
    done
    printf '%s\n' "$type" > "$dir/type"
    printf '%s\n' "$op" > "$dir/op"
    printf '%s' "${VTUNE_STANDIN_REPORT-}" > "$dir/report_src"
    printf '%s' "${VTUNE_STANDIN_CALLS-}" > "$dir/calls_log"
    : > "$dir/itt.log"
    echo "vtune: Collection started (stand-in)."
    INTEL_LIBITTNOTIFY64=$VTUNE_STANDIN_COLLECTOR LOTUS_TEST_ITT_LOG=$dir/itt.log "$@"
    status=$?
    echo "vtune: Collection stopped (stand-in); the target exited with $status."
    exit $status
    ;;
-report)
    dir=${4-}
    if [ -z "${VTUNE_STANDIN_CALLS-}" ] && [ -f "$dir/calls_log" ]; then
        VTUNE_STANDIN_CALLS=$(cat "$dir/calls_log")
    fi
    if [ -z "${VTUNE_STANDIN_REPORT-}" ] && [ -f "$dir/report_src" ]; then
        VTUNE_STANDIN_REPORT=$(cat "$dir/report_src")
    fi
    log_call "$@"
    [ $# -eq 10 ] || die "-report takes exactly 10 arguments here, got $#: $*"
    [ "$2" = "hotspots" ] || die "unknown report '$2'"
    [ "$3" = "-result-dir" ] || die "expected -result-dir, got '$3'"
    dir=$4
    [ "$5" = "-format" ] && [ "$6" = "csv" ] || die "expected -format csv, got '$5 $6'"
    [ "$7" = "-csv-delimiter" ] && [ "$8" = "comma" ] || die "expected -csv-delimiter comma, got '$7 $8'"
    [ "$9" = "-report-output" ] || die "expected -report-output, got '$9'"
    out=${10}
    [ -f "$dir/op" ] || die "$dir is not a result directory"
    grep -qx resume "$dir/itt.log" || die "no data collected in $dir: the collection was never resumed (__itt_resume)"
    if [ -n "${VTUNE_STANDIN_REPORT-}" ]; then
        src=$VTUNE_STANDIN_REPORT
    else
        op=$(cat "$dir/op")
        : "${VTUNE_STANDIN_REPORTS:?the test must set VTUNE_STANDIN_REPORTS or VTUNE_STANDIN_REPORT}"
        : "${VTUNE_STANDIN_STATE:?the test must set VTUNE_STANDIN_STATE}"
        count="$VTUNE_STANDIN_STATE/$op.count"
        n=$(($(cat "$count" 2>/dev/null || echo 0) + 1))
        echo "$n" > "$count"
        src="$VTUNE_STANDIN_REPORTS/$op/$n.csv"
    fi
    [ -f "$src" ] || die "the stand-in has no report $src"
    cp "$src" "$out" || die "cannot write $out"
    # What the stand-in collector saw in the target, for the test to check.
    # shellcheck disable=SC2046
    log_call "itt.log:" $(cat "$dir/itt.log")
    echo "vtune: Report written to $out (stand-in)."
    exit 0
    ;;
*)
    log_call "$@"
    die "unsupported command line: $*"
    ;;
esac
