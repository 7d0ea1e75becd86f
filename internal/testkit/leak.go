package testkit

import (
	"testing"

	"go.uber.org/goleak"
)

// LeakOptions returns the goroutines every leak check in cellkit ignores,
// followed by extra:
//   - the read and write loops of net/http client connections, which live
//     on a moment after CloseIdleConnections and are not ours to stop;
//   - the cleaners of the process-wide goroutine pool (ants) that gnet
//     starts once and never stops.
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	opts := []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"),
	}
	return append(opts, extra...)
}

// VerifyTestMain runs the package's tests and, if they pass, fails the run
// when goroutines are left over (LeakOptions(extra...) ignored); it then
// exits. A package with its own teardown passes goleak.Cleanup, whose
// function runs after the check and must call os.Exit with the code it is
// given.
func VerifyTestMain(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, LeakOptions(extra...)...)
}
