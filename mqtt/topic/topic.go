// Package topic matches MQTT topic names against topic filters and keeps
// the broker's subscription index.
//
// Matching follows MQTT 3.1.1 section 4.7 and 5.0 section 4.7: "+" matches
// exactly one level, "#" (last) matches the parent level and any number of
// child levels, and a filter starting with a wildcard never matches a topic
// starting with "$" [MQTT-4.7.2-1]. Shared subscriptions ("$share/group/
// filter", 5.0 section 4.8.2) are parsed by ParseShared.
package topic

import (
	"errors"
	"strings"
)

// ErrInvalidFilter reports a malformed topic filter.
var ErrInvalidFilter = errors.New("topic: invalid topic filter")

// ErrInvalidName reports a malformed topic name.
var ErrInvalidName = errors.New("topic: invalid topic name")

// ValidName reports whether name may be published to: non-empty, no
// wildcard characters, no U+0000 [MQTT-4.7.3-1, MQTT-3.3.2-2].
func ValidName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "+#\x00")
}

// ValidFilter reports whether filter is a well-formed topic filter: non-
// empty, "#" only as the whole last level, "+" only as a whole level, no
// U+0000 [MQTT-4.7.1-1, MQTT-4.7.1-2, MQTT-4.7.3-1].
func ValidFilter(filter string) bool {
	if filter == "" || strings.IndexByte(filter, 0) >= 0 {
		return false
	}
	levels := strings.Split(filter, "/")
	for i, lvl := range levels {
		if strings.ContainsAny(lvl, "#+") && lvl != "+" && (lvl != "#" || i != len(levels)-1) {
			return false
		}
	}
	return true
}

// Match reports whether topic name matches filter. Both must be valid.
func Match(filter, name string) bool {
	if name != "" && name[0] == '$' && filter != "" && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		nl, nrest, nmore := strings.Cut(name, "/")
		if fl != "+" && fl != nl {
			return false
		}
		switch {
		case !fmore && !nmore:
			return true
		case !nmore:
			// "a/#" matches "a": the parent level.
			return frest == "#"
		case !fmore:
			return false
		}
		filter, name = frest, nrest
	}
}

// Shared is a parsed shared-subscription filter.
type Shared struct {
	Group  string
	Filter string
}

// ParseShared splits "$share/group/filter". ok is false for a filter that
// is not a shared subscription; err reports a malformed one (empty group,
// a group with a wildcard, or an invalid filter) [MQTT-4.8.2-1, MQTT-4.8.2-2].
func ParseShared(filter string) (s Shared, ok bool, err error) {
	rest, found := strings.CutPrefix(filter, "$share/")
	if !found {
		if filter == "$share" {
			return Shared{}, true, ErrInvalidFilter
		}
		return Shared{}, false, nil
	}
	group, f, found := strings.Cut(rest, "/")
	if !found || group == "" || strings.ContainsAny(group, "+#") || !ValidFilter(f) {
		return Shared{}, true, ErrInvalidFilter
	}
	return Shared{Group: group, Filter: f}, true, nil
}
