package broker

import (
	"github.com/tidemark-io/tidemark/mqtt/auth"
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

	ConnInfo           = auth.ConnInfo
	Identity           = auth.Identity
	Access             = auth.Access
	Authenticator      = auth.Authenticator
	Authorizer         = auth.Authorizer
	ClientIDAuthorizer = auth.ClientIDAuthorizer
)

// The accesses an Authorizer is asked about, and the errors that refuse
// a client.
const (
	AccessRead      = auth.AccessRead
	AccessWrite     = auth.AccessWrite
	AccessSubscribe = auth.AccessSubscribe
)

var (
	ErrBadCredentials = auth.ErrBadCredentials
	ErrNotAuthorized  = auth.ErrNotAuthorized
)
