package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/state"
)

func TestWaitAnyAndTimeout(t *testing.T) {
	st := newStore(t)
	slow := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	fast := start(t, st, Spec{Argv: []string{"true"}})
	got, err := st.Wait(ctxT(t, 30*time.Second), []string{slow.Handle, fast.Handle}, ForExit, true)
	if err != nil || got[1].Status != StatusExited || got[0].Ended() {
		t.Fatalf("any: %+v, %v", got, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got, err = st.Wait(short, []string{slow.Handle}, ForExit, false)
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 1 || got[0].Status != StatusRunning {
		t.Fatalf("timeout: %+v, %v", got, err)
	}
}

func TestEventsFollow(t *testing.T) {
	st := newStore(t)
	ctx := ctxT(t, 30*time.Second)
	got := make(chan []state.Event, 1)
	go func() {
		evs, _ := st.WaitEvents(ctx, 0, "")
		got <- evs
	}()
	s := start(t, st, Spec{Argv: []string{"true"}})
	evs := <-got
	if len(evs) == 0 || evs[0].Type != "started" || evs[0].Handle != s.Handle || evs[0].Seq != 1 {
		t.Fatalf("events %+v", evs)
	}
}
