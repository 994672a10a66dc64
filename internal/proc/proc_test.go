package proc

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// The child writes to standard error before its first line, so a Stop
// that follows the line cannot come before that write.
func TestLinesStopAndLog(t *testing.T) {
	lines := make(chan string, 4)
	p, err := Start(Spec{Bin: "sh", Args: []string{"-c", `trap 'echo bye >&2; exit 0' TERM; echo oops >&2; echo ready; while :; do sleep 0.05; done`},
		Lines: func(l string) { lines <- l }})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("first line %q, want ready", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no line from the child")
	}
	if !p.Running() {
		t.Fatal("not running after its first line")
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if p.Running() || p.Err() != nil {
		t.Fatalf("after Stop: running %v, err %v", p.Running(), p.Err())
	}
	if log := p.Log(); !strings.Contains(log, "oops") || !strings.Contains(log, "bye") {
		t.Fatalf("log %q, want its standard error", log)
	}
	if err := p.Stop(time.Second); err == nil {
		t.Fatal("a second Stop succeeded on an ended process")
	}
}

func TestKill(t *testing.T) {
	p, err := Start(Spec{Bin: "sh", Args: []string{"-c", `trap '' TERM; while :; do sleep 0.05; done`}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Kill() {
		t.Fatal("not reaped after SIGKILL")
	}
	if p.Err() == nil {
		t.Fatal("a killed process reports a clean exit")
	}
}

func TestWaitListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p, err := Start(Spec{Bin: "sleep", Args: []string{"30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.WaitListen(context.Background(), ln.Addr().String(), 10*time.Second, nil); err != nil {
		t.Fatalf("wait on a listening address: %v", err)
	}

	gone, err := Start(Spec{Bin: "sh", Args: []string{"-c", "echo cannot bind >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln2.Addr().String()
	ln2.Close() // nothing listens there
	err = gone.WaitListen(context.Background(), addr, time.Minute, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot bind") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("wait on a process that ended: %v, want its exit and output", err)
	}
}
