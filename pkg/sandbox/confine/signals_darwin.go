package confine

import (
	"os"
	"os/signal"
)

// catchSignals catches every signal, on another goroutine: the macOS
// helper execs sandbox-exec at once, which gets the default dispositions
// of caught signals back.
func catchSignals() {
	go func() {
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs)
		for range sigs {
		}
	}()
}
