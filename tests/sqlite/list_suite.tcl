# Prints the test files of one of SQLite's permutations.test suites, one per
# line, in the form run_testfixture.sh takes: a file of test/ by its name,
# a file of an extension by its path from the source root
# (ext/fts5/test/fts5aa.test). Copied into the cached source tree's test/
# (permutations.test finds its directory from argv0) and run by
# tests/sqlite/sweep_veryquick.sh:
#   testfixture test/list_suite.tcl SUITE
# Loads nothing and runs no test. Our own nvfence_vfs.test, copied into
# test/ by run_testfixture.sh, is not SQLite's and is left out.
set testdir [file dirname $argv0]
set nvf_suite [lindex $argv 0]
set argv {}
source $testdir/permutations.test
if {![info exists ::testspec($nvf_suite)]} {
  puts stderr "list_suite.tcl: no suite named '$nvf_suite' in permutations.test"
  exit 2
}
array set nvf_spec $::testspec($nvf_suite)
set nvf_root [file normalize [file join $testdir ..]]
foreach f $nvf_spec(-files) {
  set full [file normalize [file join $testdir $f]]
  if {[file dirname $full] eq [file normalize $testdir]} {
    if {[file tail $full] eq "nvfence_vfs.test"} continue
    puts [file tail $full]
  } else {
    puts [string range $full [expr {[string length $nvf_root] + 1}] end]
  }
}
exit 0
