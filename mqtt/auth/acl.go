package auth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// ACL is a parsed ACL file in mosquitto's acl_file format, with one
// addition, clientid rules:
//
//	# comment
//	topic read public/#              rules before any user line: anonymous clients
//	clientid anon-*                  client ids anonymous clients may use
//	user alice
//	topic readwrite alice/#          alice's rules
//	topic deny alice/secret/#
//	clientid alice-*                 client ids alice may use, and only alice
//	pattern read devices/%u/#        every client; %u is the user, %c the client id
//	pattern clientid %u-*            every user may use client ids of this form,
//	                                 and they belong to that user alone
//
// Access is read, write, readwrite or deny; `topic FILTER` alone is
// readwrite (a filter with a space in it needs the access before it). A deny rule that matches wins over every grant; otherwise
// the user's own rules, then the patterns, are searched for a grant, and
// none means denied. A subscription is granted when a read rule covers
// every topic its filter can match, and refused when a deny rule's filter
// matches any topic it can match: a subscription to # is refused to a
// client denied anything. A %u or %c that would put +, # or / into a
// filter makes the rule match nothing. A client id `*` matches any run
// of characters.
type ACL struct {
	anon        ruleSet
	users       map[string]*ruleSet
	patterns    ruleSet // rules and clientid patterns for everyone
	hasClientID bool
}

type perm uint8

const (
	permRead perm = 1 << iota
	permWrite
	permDeny
)

type rule struct {
	perm   perm
	filter string
}

type ruleSet struct {
	rules     []rule
	clientIDs []string
}

// ParseACL reads an ACL file; the first bad line is returned as a
// *LineError.
func ParseACL(r io.Reader) (*ACL, error) {
	a := &ACL{users: map[string]*ruleSet{}}
	cur := &a.anon
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		bad := func(format string, args ...any) error {
			return &LineError{Line: n, Err: fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, args...)...)}
		}
		kw, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch kw {
		case "user":
			if rest == "" {
				return nil, bad("user needs a name")
			}
			if a.users[rest] == nil {
				a.users[rest] = &ruleSet{}
			}
			cur = a.users[rest]
		case "topic", "pattern":
			set := cur
			if kw == "pattern" {
				set = &a.patterns
			}
			p, filter, err := parseRule(rest)
			if errors.Is(err, errClientIDRule) {
				if filter == "" {
					return nil, bad("clientid needs a client id")
				}
				if kw == "topic" {
					return nil, bad("write `clientid %s`, or `pattern clientid %s` for every user", filter, filter)
				}
				a.patterns.clientIDs = append(a.patterns.clientIDs, filter)
				a.hasClientID = true
				continue
			}
			if err != nil {
				return nil, bad("%v", err)
			}
			set.rules = append(set.rules, rule{perm: p, filter: filter})
		case "clientid":
			if rest == "" {
				return nil, bad("clientid needs a client id")
			}
			cur.clientIDs = append(cur.clientIDs, rest)
			a.hasClientID = true
		default:
			return nil, bad("unknown keyword %q: want user, topic, pattern or clientid", kw)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &LineError{Line: n + 1, Err: err}
	}
	return a, nil
}

var errClientIDRule = errors.New("clientid")

// parseRule reads "[read|write|readwrite|deny] FILTER" (or "clientid ID"
// after pattern).
func parseRule(s string) (perm, string, error) {
	if s == "" {
		return 0, "", errors.New("a topic filter is missing")
	}
	first, rest, _ := strings.Cut(s, " ")
	rest = strings.TrimSpace(rest)
	var p perm
	switch first {
	case "read":
		p = permRead
	case "write":
		p = permWrite
	case "readwrite":
		p = permRead | permWrite
	case "deny":
		p = permDeny
	case "clientid":
		return 0, rest, errClientIDRule
	default:
		// As mosquitto reads it: a filter alone is readwrite; with more
		// after it, the first word must be the access (a filter with a
		// space needs one).
		if rest != "" {
			return 0, "", fmt.Errorf("unknown access %q: use read, write, readwrite or deny", first)
		}
		p, rest = permRead|permWrite, s
	}
	if rest == "" {
		return 0, "", fmt.Errorf("%s needs a topic filter", first)
	}
	// %u and %c are checked once substituted; a placeholder is a valid
	// level of its own.
	if !topic.ValidFilter(strings.NewReplacer("%u", "u", "%c", "c").Replace(rest)) {
		return 0, "", fmt.Errorf("topic filter %q is not valid: # only as the last level, + only as a whole level", rest)
	}
	return p, rest, nil
}

// LoadACL reads the ACL file at path.
func LoadACL(path string) (*ACL, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acl file: %w", err)
	}
	defer f.Close()
	a, err := ParseACL(f)
	var le *LineError
	if errors.As(err, &le) {
		le.File = path
	}
	return a, err
}

// Allow reports whether user (empty: anonymous) connected as clientID
// has access to name (a topic, or a filter for AccessSubscribe).
func (a *ACL) Allow(user, clientID string, acc Access, name string) bool {
	own := &a.anon
	if user != "" {
		own = a.users[user]
	}
	var sets [2][]rule
	if own != nil {
		sets[0] = own.rules
	}
	sets[1] = a.patterns.rules
	granted := false
	for i, rules := range sets {
		for _, r := range rules {
			f := r.filter
			if i == 1 {
				var ok bool
				if f, ok = substitute(f, user, clientID); !ok {
					continue
				}
			}
			if r.perm == permDeny {
				if (acc == AccessSubscribe && intersects(f, name)) || (acc != AccessSubscribe && topic.Match(f, name)) {
					return false
				}
				continue
			}
			if granted {
				continue
			}
			switch acc {
			case AccessRead:
				granted = r.perm&permRead != 0 && topic.Match(f, name)
			case AccessWrite:
				granted = r.perm&permWrite != 0 && topic.Match(f, name)
			case AccessSubscribe:
				granted = r.perm&permRead != 0 && covers(f, name)
			}
		}
	}
	return granted
}

// substitute replaces %u and %c in a pattern; false when a value it needs
// is missing or would change the filter's shape.
func substitute(f, user, clientID string) (string, bool) {
	if strings.Contains(f, "%u") {
		if user == "" || strings.ContainsAny(user, "+#/") {
			return "", false
		}
		f = strings.ReplaceAll(f, "%u", user)
	}
	if strings.Contains(f, "%c") {
		if clientID == "" || strings.ContainsAny(clientID, "+#/") {
			return "", false
		}
		f = strings.ReplaceAll(f, "%c", clientID)
	}
	return f, true
}

// AllowClientID reports whether user (empty: anonymous) may connect with
// clientID. With no clientid rules at all every client id is free. A user
// with clientid rules of its own or from patterns may use only the ids
// they match; an id matched by another user's rules, or by a pattern for
// some user, is refused to everyone else, anonymous clients included; an
// anonymous client is held to the anonymous clientid rules when there
// are any.
func (a *ACL) AllowClientID(user, clientID string) bool {
	if !a.hasClientID {
		return true
	}
	if user == "" {
		for _, p := range a.patterns.clientIDs {
			if globMatch(p, clientID, true) {
				return false
			}
		}
	} else {
		var mine []string
		if own := a.users[user]; own != nil {
			mine = append(mine, own.clientIDs...)
		}
		for _, p := range a.patterns.clientIDs {
			if s, ok := substituteID(p, user); ok {
				mine = append(mine, s)
			}
		}
		if len(mine) > 0 && !matchAny(mine, clientID) {
			return false
		}
	}
	for name, set := range a.users {
		if name == user {
			continue
		}
		for _, p := range set.clientIDs {
			if s, ok := substituteID(p, name); ok && globMatch(s, clientID, false) {
				return false
			}
		}
	}
	if user == "" && len(a.anon.clientIDs) > 0 {
		return matchAny(a.anon.clientIDs, clientID)
	}
	return true
}

func substituteID(p, user string) (string, bool) {
	if strings.Contains(p, "%c") {
		return "", false // a client id pattern cannot refer to itself
	}
	return strings.ReplaceAll(p, "%u", user), true
}

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if globMatch(g, s, false) {
			return true
		}
	}
	return false
}

// globMatch reports whether s matches the client id glob g: * is any
// run of characters; with anyUser %u is any non-empty run too. It runs in
// len(g) x len(s) steps whatever the glob.
func globMatch(g, s string, anyUser bool) bool {
	// dp[j]: the glob read so far matches s[:j].
	dp := make([]bool, len(s)+1)
	next := make([]bool, len(s)+1)
	dp[0] = true
	for i := 0; i < len(g); i++ {
		clear(next)
		switch {
		case g[i] == '*':
			seen := false
			for j := range dp {
				seen = seen || dp[j]
				next[j] = seen
			}
		case anyUser && strings.HasPrefix(g[i:], "%u"):
			i++
			seen := false
			for j := 1; j < len(dp); j++ {
				seen = seen || dp[j-1]
				next[j] = seen
			}
		default:
			for j := 1; j < len(dp); j++ {
				next[j] = dp[j-1] && s[j-1] == g[i]
			}
		}
		dp, next = next, dp
	}
	return dp[len(s)]
}

// covers reports whether every topic filter sub matches is matched by f.
func covers(f, sub string) bool {
	fl, sl := strings.Split(f, "/"), strings.Split(sub, "/")
	for i, l := range fl {
		if i == 0 && isWild(l) && len(sl[0]) > 0 && sl[0][0] == '$' {
			return false // wildcards do not match $ topics
		}
		if l == "#" {
			return true
		}
		if i >= len(sl) {
			return false
		}
		switch {
		case sl[i] == "#":
			return false
		case l == "+":
		case sl[i] == "+" || l != sl[i]:
			return false
		}
	}
	return len(sl) == len(fl)
}

// intersects reports whether some topic is matched by both filters.
func intersects(a, b string) bool {
	al, bl := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; ; i++ {
		switch {
		case i == len(al) && i == len(bl):
			return true
		case i == len(al):
			return bl[i] == "#"
		case i == len(bl):
			return al[i] == "#"
		}
		x, y := al[i], bl[i]
		if i == 0 && ((isWild(x) && hasDollar(y)) || (isWild(y) && hasDollar(x))) {
			return false
		}
		if x == "#" || y == "#" {
			return true
		}
		if x != "+" && y != "+" && x != y {
			return false
		}
	}
}

func isWild(l string) bool    { return l == "+" || l == "#" }
func hasDollar(l string) bool { return len(l) > 0 && l[0] == '$' }
