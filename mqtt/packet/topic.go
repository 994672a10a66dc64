package packet

import "unicode/utf8"

// ValidTopicName reports whether s may be the topic of a PUBLISH or a Will:
// at least one byte [MQTT-4.7.3-1], well-formed UTF-8 without U+0000, and no
// wildcard character [MQTT-3.3.2-2]. (A 5.0 PUBLISH may carry an empty topic
// together with a Topic Alias; that case is the decoder's, not this
// function's.)
func ValidTopicName(s string) bool {
	return len(s) > 0 && validTopicChars(s)
}

// ValidTopicFilter reports whether s may be the topic filter of a SUBSCRIBE
// or UNSUBSCRIBE: non-empty, well-formed UTF-8 without U+0000, '#' only as
// the whole last level, '+' only as a whole level [MQTT-4.7.1-1,
// MQTT-4.7.1-2], and, for a shared subscription "$share/{name}/{filter}", a
// non-empty share name without wildcards or '/' followed by a valid
// non-empty filter [MQTT-4.8.2-1, MQTT-4.8.2-2].
func ValidTopicFilter(s string) bool {
	return validUTF8String(s) && validFilter(s)
}

func validUTF8String(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return utf8.ValidString(s)
}

// validTopicChars checks a topic name's characters: UTF-8, no U+0000, no
// wildcard. Multi-byte sequences never contain bytes below 0x80, so the
// byte scan cannot mistake part of one for '+', '#' or NUL.
func validTopicChars[S ~string | ~[]byte](s S) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0 || c == '+' || c == '#':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	if ascii {
		return true
	}
	switch v := any(s).(type) {
	case string:
		return utf8.ValidString(v)
	case []byte:
		return utf8.Valid(v)
	}
	return false
}

// validFilter checks wildcard placement and the shared-subscription form;
// the characters were checked as a UTF-8 string already.
func validFilter[S ~string | ~[]byte](f S) bool {
	if len(f) == 0 {
		return false
	}
	const share = "$share/"
	if len(f) >= len(share) && string(f[:len(share)]) == share {
		rest := f[len(share):]
		slash := -1
		for i := 0; i < len(rest); i++ {
			c := rest[i]
			if c == '/' {
				slash = i
				break
			}
			if c == '+' || c == '#' {
				return false
			}
		}
		if slash <= 0 {
			return false
		}
		f = rest[slash+1:]
		if len(f) == 0 {
			return false
		}
	}
	last := len(f) - 1
	for i := 0; i <= last; i++ {
		switch f[i] {
		case '#':
			if i != last || (i > 0 && f[i-1] != '/') {
				return false
			}
		case '+':
			if (i > 0 && f[i-1] != '/') || (i < last && f[i+1] != '/') {
				return false
			}
		}
	}
	return true
}
