package main

import "golang.org/x/sys/unix"

// monoNs is CLOCK_MONOTONIC in nanoseconds: the clock of Python's time.monotonic_ns(), so the
// history's times compare with the nemesis's on the same machine.
func monoNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
