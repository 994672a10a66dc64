package mqttbench

import "testing"

// TestProtoErrorsKeepFirst: the count covers every error and the
// description is the first one's, also across a merge of the publishers'
// and the subscriber's.
func TestProtoErrorsKeepFirst(t *testing.T) {
	var pub, sub, all protoErrors
	all.merge(pub)
	if all.n != 0 || all.first != "" {
		t.Fatalf("merged nothing: %d %q", all.n, all.first)
	}
	sub.add("id %d reused", 7)
	sub.add("id %d reused", 8)
	pub.add("stray PUBREC %d", 3)
	all.merge(pub)
	all.merge(sub)
	if all.n != 3 || all.first != "stray PUBREC 3" {
		t.Fatalf("got %d, first %q; want 3, first %q", all.n, all.first, "stray PUBREC 3")
	}
}
