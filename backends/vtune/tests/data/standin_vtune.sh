#!/bin/bash
# A stand-in for Intel's `vtune` command, for tests on machines without
# VTune. It accepts exactly the command lines lotus documents, and fails on
# anything else:
#
#   vtune --version
#   vtune -collect TYPE [-knob sampling-mode=sw|hw] [-knob sampling-interval=MS]
#         -start-paused -result-dir D -- CMD [ARGS...]   (options in any order)
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
# With VTUNE_STANDIN_REPORT_HANG set (in the target's environment), -report
# never ends: it waits on a child `sleep` (its pid in D/report_hang_child).
#
# The report command does not get the target's environment: -collect saves
# VTUNE_STANDIN_REPORT, VTUNE_STANDIN_CALLS and VTUNE_STANDIN_REPORT_HANG
# from it in D for -report.
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
    [ $# -ge 2 ] || die "too few arguments for -collect: $*"
    type=$2
    case "$type" in "" | -*) die "-collect needs an analysis type, got '$type'" ;; esac
    shift 2
    # Options up to "--", in any order, as vtune takes them. Knobs as VTune's
    # User Guide documents them for hotspots: sampling-mode=sw|hw and
    # sampling-interval=MS, 1 to 1000 in user mode (sw), 0.01 to 1000 in
    # hardware mode (hw); other analyses get no sampling-mode knob here.
    paused=0 dir="" mode="" interval=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        case "$1" in
        -start-paused) paused=1; shift ;;
        -result-dir)
            [ $# -ge 2 ] || die "-result-dir needs a folder"
            dir=$2; shift 2 ;;
        -knob)
            [ $# -ge 2 ] || die "-knob needs NAME=VALUE"
            case "$2" in
            sampling-mode=sw | sampling-mode=hw)
                [ "$type" = hotspots ] || die "knob sampling-mode is not valid for the $type analysis"
                [ -z "$mode" ] || die "knob sampling-mode given twice"
                mode=${2#*=} ;;
            sampling-interval=*)
                [ -z "$interval" ] || die "knob sampling-interval given twice"
                interval=${2#*=}
                printf '%s' "$interval" | grep -Eq '^[0-9]+(\.[0-9]+)?$' ||
                    die "knob sampling-interval: '$interval' is not a number of milliseconds" ;;
            *) die "unknown knob '$2' for the $type analysis" ;;
            esac
            shift 2 ;;
        *) die "unexpected option '$1' before --" ;;
        esac
    done
    [ "${1-}" = "--" ] || die "expected -- before the target command"
    shift
    [ $# -ge 1 ] || die "no target command after --"
    [ $paused = 1 ] || die "expected -start-paused"
    [ -n "$dir" ] || die "expected -result-dir"
    [ -n "$mode" ] || mode=sw
    if [ -n "$interval" ]; then
        if [ "$mode" = sw ]; then low=1; else low=0.01; fi
        awk -v v="$interval" -v lo="$low" 'BEGIN { exit !(v >= lo && v <= 1000) }' ||
            die "knob sampling-interval=$interval is out of range for sampling-mode=$mode ($low to 1000 ms)"
    fi
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
    printf '%s' "${VTUNE_STANDIN_REPORT_HANG-}" > "$dir/report_hang"
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
    if [ -s "$dir/report_hang" ]; then
        # A report that never ends (a tool stuck finalizing), with a child
        # of its own that must be stopped with it.
        echo "vtune: finalizing the result (stand-in, hanging)"
        sleep 3600 &
        echo $! > "$dir/report_hang_child"
        wait
    fi
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
