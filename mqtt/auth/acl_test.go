package auth

import (
	"errors"
	"strings"
	"testing"
)

const aclText = `# anonymous clients
topic read public/#
clientid anon_*

user alice
topic readwrite alice/#
topic deny alice/secret/#
topic write shared/in
clientid alice-*

user bob
topic read alice/status
topic bob/#

pattern read devices/%u/#
pattern write devices/%u/%c/out
pattern clientid %u-*
`

func mustACL(t *testing.T, text string) *ACL {
	t.Helper()
	a, err := ParseACL(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestACLTopics(t *testing.T) {
	a := mustACL(t, aclText)
	for _, c := range []struct {
		user, client string
		acc          Access
		name         string
		ok           bool
	}{
		{"", "anon_1", AccessRead, "public/news", true},
		{"", "anon_1", AccessWrite, "public/news", false},
		{"", "anon_1", AccessRead, "alice/x", false},
		{"", "anon_1", AccessSubscribe, "public/#", true},
		{"", "anon_1", AccessSubscribe, "#", false},
		{"alice", "alice-1", AccessWrite, "alice/a/b", true},
		{"alice", "alice-1", AccessRead, "alice/secret/x", false},
		{"alice", "alice-1", AccessWrite, "alice/secret", false},
		{"alice", "alice-1", AccessSubscribe, "alice/a/+", true},
		{"alice", "alice-1", AccessSubscribe, "alice/+/x", false}, // alice/secret/x
		{"alice", "alice-1", AccessSubscribe, "alice/#", false},   // overlaps the deny
		{"alice", "alice-1", AccessSubscribe, "alice/secret/#", false},
		{"alice", "alice-1", AccessRead, "shared/in", false},
		{"alice", "alice-1", AccessWrite, "shared/in", true},
		{"alice", "alice-1", AccessRead, "public/news", false}, // anonymous rules are not alice's
		{"bob", "bob-1", AccessRead, "alice/status", true},
		{"bob", "bob-1", AccessWrite, "alice/status", false},
		{"bob", "bob-1", AccessSubscribe, "alice/+", false},
		{"bob", "bob-1", AccessWrite, "bob/x/y", true},
		{"bob", "bob-1", AccessRead, "devices/bob/t", true},
		{"bob", "bob-1", AccessRead, "devices/alice/t", false},
		{"bob", "bob-1", AccessSubscribe, "devices/bob/#", true},
		{"bob", "bob-1", AccessSubscribe, "devices/+/t", false},
		{"bob", "bob-1", AccessWrite, "devices/bob/bob-1/out", true},
		{"bob", "bob-2", AccessWrite, "devices/bob/bob-1/out", false},
		{"carol", "c", AccessRead, "devices/carol/x", true}, // no user section: patterns only
		{"carol", "c", AccessRead, "carol/x", false},
		{"", "anon_1", AccessRead, "devices//x", false}, // %u needs a user
		{"a+b", "x", AccessRead, "devices/a+b/x", false},
		{"evil/x", "x", AccessRead, "devices/evil/x/t", false}, // a / in the user name changes no level
	} {
		if got := a.Allow(c.user, c.client, c.acc, c.name); got != c.ok {
			t.Errorf("Allow(%q, %q, %d, %q) = %v, want %v", c.user, c.client, c.acc, c.name, got, c.ok)
		}
	}
}

func TestACLDollarTopics(t *testing.T) {
	a := mustACL(t, "user root\ntopic #\ntopic read $SYS/#\n")
	if a.Allow("root", "c", AccessRead, "$SYS/uptime") != true || a.Allow("root", "c", AccessSubscribe, "$SYS/#") != true {
		t.Fatal("$SYS/# rule does not grant $SYS topics")
	}
	b := mustACL(t, "user root\ntopic #\n")
	if b.Allow("root", "c", AccessRead, "$SYS/uptime") || b.Allow("root", "c", AccessSubscribe, "$SYS/#") || b.Allow("root", "c", AccessSubscribe, "+/uptime") != true {
		t.Fatal("# must not grant $ topics, and must grant +/uptime")
	}
}

func TestACLClientIDs(t *testing.T) {
	a := mustACL(t, aclText)
	for _, c := range []struct {
		user, client string
		ok           bool
	}{
		{"alice", "alice-1", true},
		{"alice", "bob-1", false},   // bob's by the pattern
		{"bob", "alice-1", false},   // alice's by her rule and the pattern
		{"bob", "bob-9", true},      // the pattern
		{"bob", "anything", false},  // bob is bound by the pattern
		{"", "anon_7", true},        // anonymous rule
		{"", "alice-1", false},      // alice's
		{"", "free", false},         // anonymous clients are held to anon-*
		{"carol", "carol-x", true},  // the pattern for carol
		{"carol", "alice-x", false}, // alice's
	} {
		if got := a.AllowClientID(c.user, c.client); got != c.ok {
			t.Errorf("AllowClientID(%q, %q) = %v, want %v", c.user, c.client, got, c.ok)
		}
	}
	if !mustACL(t, "user alice\ntopic a/#\n").AllowClientID("bob", "alice") {
		t.Fatal("without clientid rules every client id is free")
	}
}

func TestParseACLErrors(t *testing.T) {
	for _, c := range []struct {
		text string
		line int
	}{
		{"user\n", 1},
		{"topic read\n", 1},
		{"# c\ntopic read a/#/b\n", 2},
		{"user a\ntopic a/b#\n", 2},
		{"users a\n", 1},
		{"topic clientid x\n", 1},
		{"clientid\n", 1},
		{"pattern read\n", 1},
		{"user bob\ntopic raed alice/#\n", 2},
	} {
		_, err := ParseACL(strings.NewReader(c.text))
		var le *LineError
		if !errors.As(err, &le) || le.Line != c.line || !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseACL(%q) = %v, want a syntax error at line %d", c.text, err, c.line)
		}
	}
}

func TestCoversAndIntersects(t *testing.T) {
	for _, c := range []struct {
		f, sub   string
		cov, hit bool
	}{
		{"a/#", "a", true, true},
		{"a/#", "a/b/+", true, true},
		{"a/+", "a/b", true, true},
		{"a/+", "a/#", false, true},
		{"a/+", "a/b/c", false, false},
		{"a/b", "a/+", false, true},
		{"#", "#", true, true},
		{"#", "$SYS/#", false, false},
		{"+/x", "$SYS/x", false, false},
		{"a/b", "a/c", false, false},
		{"a", "a/#", false, true},
	} {
		if got := covers(c.f, c.sub); got != c.cov {
			t.Errorf("covers(%q, %q) = %v, want %v", c.f, c.sub, got, c.cov)
		}
		if got := intersects(c.f, c.sub); got != c.hit {
			t.Errorf("intersects(%q, %q) = %v, want %v", c.f, c.sub, got, c.hit)
		}
		if intersects(c.f, c.sub) != intersects(c.sub, c.f) {
			t.Errorf("intersects(%q, %q) is not symmetric", c.f, c.sub)
		}
	}
}

// FuzzParseACL: no input panics the parser, and the rules of any file it
// accepts answer every check without panicking.
func FuzzParseACL(f *testing.F) {
	f.Add(aclText)
	f.Add("user a\ntopic deny #\npattern readwrite %u/%c/#\n")
	f.Add("pattern clientid %u-*\nclientid *\n")
	f.Fuzz(func(t *testing.T, text string) {
		a, err := ParseACL(strings.NewReader(text))
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for _, user := range []string{"", "a", "alice"} {
			for _, name := range []string{"a/b", "#", "a/+/c", "$SYS/x"} {
				_ = a.Allow(user, "c1", AccessSubscribe, name)
				if name[0] != '#' && !strings.Contains(name, "+") {
					_ = a.Allow(user, "c1", AccessRead, name)
					_ = a.Allow(user, "c1", AccessWrite, name)
				}
			}
			_ = a.AllowClientID(user, "a-1")
		}
	})
}
