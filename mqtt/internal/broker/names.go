package broker

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/retention"
)

// The names the broker's public package gives these types, used here
// under the same names.
type (
	Message       = message.Message
	UserProperty  = message.UserProperty
	RetentionRule = retention.Rule
	RetentionStat = retention.Stat
)
