package mqtttest

import (
	"context"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// Logged is one message of a broker's message log.
type Logged struct {
	Key     engine.LogKey // the log key of the commit that wrote it
	Message mqtt.Message
}

// LogMessages reads a broker's message log (mqtt.MessageTable) from where
// retention left it to its head, in log order, and returns the messages
// on topic ("": every topic). The broker may be running.
func LogMessages(ctx context.Context, db *table.DB, topic string) ([]Logged, error) {
	st, err := db.LogStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("log stats: %w", err)
	}
	var from table.Cursor
	if st.Floor > 0 {
		from.Key = st.Floor - 1 // the retained log starts above it
	}
	var out []Logged
	_, err = db.Follow(ctx, table.SubscribeOptions{Table: mqtt.MessageTable, Start: from, IncludeSuperseded: true,
		Hooks: table.Hooks{Live: func() bool { return false }}}, func(ev table.Event) error {
		if topic != "" && ev.ID != topic {
			return nil
		}
		var m mqtt.Message
		if err := m.UnmarshalBinary(ev.Value); err != nil {
			return fmt.Errorf("message at %v: %w", ev.Key, err)
		}
		out = append(out, Logged{Key: ev.Key, Message: m})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the message log: %w", err)
	}
	return out, nil
}

// LogPayloads is LogMessages' payloads on topic, or fails the test.
func LogPayloads(t TB, ctx context.Context, db *table.DB, topic string) []string {
	t.Helper()
	ms, err := LogMessages(ctx, db, topic)
	if err != nil {
		t.Fatalf("%v", err)
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Message.Payload)
	}
	return out
}
