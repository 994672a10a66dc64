package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMergeRounds: a broker measured in several rounds reports the median
// of each figure on its own, the timeline of the median spread round, and
// every loss, duplicate and retry of any round.
func TestMergeRounds(t *testing.T) {
	rs := []Result{
		{Broker: "b", Sessions: 10, SetupRate: 300, Spread: 10, Fanout: 7, P99: 3 * time.Millisecond, RSS: 30, CPU: Costs{Setup: 3}, Timeline: []Window{{Count: 1}}},
		{Broker: "b", Sessions: 10, SetupRate: 100, Spread: 30, Fanout: 9, P99: 1 * time.Millisecond, RSS: 10, CPU: Costs{Setup: 1}, Lost: 2, Timeline: []Window{{Count: 2}}},
		{Broker: "b", Sessions: 10, SetupRate: 200, Spread: 20, Fanout: 8, P99: 2 * time.Millisecond, RSS: 20, CPU: Costs{Setup: 2}, Dup: 1, Retries: 4, Timeline: []Window{{Count: 3}}},
	}
	m := mergeRounds(rs)
	if m.SetupRate != 200 || m.Spread != 20 || m.Fanout != 8 || m.P99 != 2*time.Millisecond || m.RSS != 20 || m.CPU.Setup != 2 {
		t.Errorf("not the medians: %+v", m)
	}
	if len(m.Timeline) != 1 || m.Timeline[0].Count != 3 {
		t.Errorf("timeline %+v, want the median spread round's", m.Timeline)
	}
	if m.Lost != 2 || m.Dup != 1 || m.Retries != 4 || m.Rounds != 3 || m.Err != nil {
		t.Errorf("lost %d dup %d retries %d rounds %d err %v: want 2, 1, 4, 3, nil", m.Lost, m.Dup, m.Retries, m.Rounds, m.Err)
	}
	rs[1].Err = errors.New("refused")
	if m := mergeRounds(rs); m.Err == nil || m.Err.Error() != "round 2 of 3: refused" {
		t.Errorf("a failed round: err %v", m.Err)
	}
	rs[1].Err = nil
	if table := Table([]Result{mergeRounds(rs)}); !strings.Contains(table, "median of 3 rounds") {
		t.Errorf("the table does not say its figures are medians:\n%s", table)
	}
}
