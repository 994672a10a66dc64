// Package tabletopic maps topics onto tables (see docs/tables.md): with a
// prefix set (the broker's Options.TablesPrefix), the topics under it name records of the table layer: <prefix><table>/<id>
// is the record <id> of table <table>, in the same table.DB as the broker.
//
// A PUBLISH on such a topic writes the table instead of the message log:
// a retained one puts the record (an empty payload deletes it), one that
// is not retained appends a message under the id (table.Tx.Message),
// which changes no record. A subscription to <prefix><table>/<id filter>
// is served by a table.Subscription of its own: it sends the current
// records first (read from one consistent view, with the RETAIN flag as
// retained messages have it) and then every change, in log order, with
// no gap and no duplicate between the two. Writes made by an application
// through package table reach MQTT subscribers the same way, since both
// read the table's change log.
//
// The table layer stores a record's value as bytes, nothing else. The
// 5.0 properties of the PUBLISH that wrote it (content type, payload
// format, response topic, correlation data, user properties) and its
// publisher are kept beside it in MetaTable, stamped with the
// version of the transaction that wrote the record: a subscriber gets
// them only with the write they came with, never with a later write an
// application made through package table.
package tabletopic

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/table"
)

// MetaTable holds, per record or message id written from MQTT, the
// properties of that PUBLISH (unchecked state, no change-log entry):
// id = kind ('r' record, 'm' message), table, NUL, record id.
const MetaTable = "mqtt.tablemeta"

// reservedTablePrefix starts the names of the broker's own tables, which
// the namespace never reaches.
const reservedTablePrefix = "mqtt."

// ErrTopic reports a topic or filter under the prefix that
// names no record or table the broker may use: no table or id level, a
// wildcard in the table level, a reserved or over-long table name, an
// over-long id.
var ErrTopic = errors.New("mqtt: invalid table topic")

// Space is the table namespace under Prefix, a topic name ending with
// "/" (see the package doc); an empty Prefix turns it off.
type Space struct {
	Prefix string
}

// Contains reports whether the topic name or filter name is under the
// prefix.
func (s Space) Contains(name string) bool {
	p := s.Prefix
	return p != "" && strings.HasPrefix(name, p)
}

// Split splits a topic name under the prefix into its table
// and record id, checking both.
func (s Space) Split(name string) (tbl, id string, err error) {
	rest := strings.TrimPrefix(name, s.Prefix)
	tbl, id, found := strings.Cut(rest, "/")
	if !found || id == "" {
		return "", "", fmt.Errorf("%w: %q: use %s<table>/<id>, with a table name and a record id", ErrTopic, name, s.Prefix)
	}
	if err := checkTableName(name, tbl); err != nil {
		return "", "", err
	}
	if len(id) > table.MaxID {
		return "", "", fmt.Errorf("%w: %q: a record id of %d bytes, the limit is %d", ErrTopic, name, len(id), table.MaxID)
	}
	return tbl, id, nil
}

// checkTableName checks the table level tbl of name.
func checkTableName(name, tbl string) error {
	switch {
	case tbl == "":
		return fmt.Errorf("%w: %q: the table level is empty", ErrTopic, name)
	case tbl == "+" || tbl == "#":
		return fmt.Errorf("%w: %q: a table subscription names one table; wildcards may follow it, in the record id", ErrTopic, name)
	case strings.HasPrefix(tbl, reservedTablePrefix):
		return fmt.Errorf("%w: %q: table names starting with %q are the broker's own", ErrTopic, name, reservedTablePrefix)
	case len(tbl) > table.MaxTableName:
		return fmt.Errorf("%w: %q: a table name of %d bytes, the limit is %d", ErrTopic, name, len(tbl), table.MaxTableName)
	}
	return nil
}

// Filter is a subscription filter under the prefix: one table, and a
// filter over its record ids.
type Filter struct {
	Filter string // the whole topic filter
	Table  string
	IDs    string // the ids the filter can match start with it
}

// ParseFilter checks a subscription filter under the prefix.
func (s Space) ParseFilter(filter string) (Filter, error) {
	rest := strings.TrimPrefix(filter, s.Prefix)
	tbl, idf, found := strings.Cut(rest, "/")
	if err := checkTableName(filter, tbl); err != nil {
		return Filter{}, err
	}
	if !found || idf == "" {
		return Filter{}, fmt.Errorf("%w: %q: use %s<table>/# or %s<table>/<id filter>", ErrTopic, filter, s.Prefix, s.Prefix)
	}
	var lit []string
	for _, l := range strings.Split(idf, "/") {
		if l == "+" || l == "#" {
			break
		}
		lit = append(lit, l)
	}
	return Filter{Filter: filter, Table: tbl, IDs: strings.Join(lit, "/")}, nil
}

// TopicOf returns the topic name of record id of the filter's table,
// under prefix.
func (f Filter) TopicOf(prefix, id string) string { return prefix + f.Table + "/" + id }

// metaID is the id in MetaTable of the properties of a record (kind 'r') or
// message ('m') id of table tbl.
func metaID(kind byte, tbl, id string) string {
	return string(kind) + tbl + "\x00" + id
}

// AddWrite writes the PUBLISH m, on a topic under the prefix,
// to its table in tx: a retained one puts or deletes the record, another
// appends a message. Its properties go to MetaTable.
func (s Space) AddWrite(tx *table.Tx, m *message.Message) error {
	tbl, id, err := s.Split(m.Topic)
	if err != nil {
		return err
	}
	kind := byte('m')
	switch {
	case !m.Retain:
		err = tx.Message(tbl, id, m.Payload)
	case len(m.Payload) == 0:
		if err = tx.Delete(tbl, id); err == nil {
			return tx.DeleteStateUnchecked(MetaTable, metaID('r', tbl, id))
		}
	default:
		kind = 'r'
		err = tx.Put(tbl, id, m.Payload)
	}
	if err != nil {
		return err
	}
	meta := message.Message{From: m.From, PayloadFormat: m.PayloadFormat, HasFormat: m.HasFormat, ContentType: m.ContentType,
		ResponseTopic: m.ResponseTopic, CorrelationData: m.CorrelationData, UserProps: m.UserProps}
	enc, err := meta.MarshalBinary()
	if err != nil {
		return err
	}
	return tx.PutStateUnchecked(MetaTable, metaID(kind, tbl, id), enc)
}

// Message builds the message a table subscriber receives for a
// write of tbl/id at version v: the payload as stored, and the
// properties of the PUBLISH that wrote it when get finds them stamped
// with v (nil get: none looked up).
func (s Space) Message(op table.Op, tbl, id string, value []byte, v table.Version, get func(string) (table.Record, error)) *message.Message {
	m := &message.Message{Topic: s.Prefix + tbl + "/" + id, Payload: value, QoS: 1, Retain: op != table.OpMessage}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	if get == nil || op == table.OpDelete {
		return m
	}
	kind := byte('r')
	if op == table.OpMessage {
		kind = 'm'
	}
	r, err := get(metaID(kind, tbl, id))
	if err != nil || r.Version != v {
		return m
	}
	var meta message.Message
	if meta.UnmarshalBinary(r.Value) != nil {
		return m
	}
	m.From, m.PayloadFormat, m.HasFormat, m.ContentType = meta.From, meta.PayloadFormat, meta.HasFormat, meta.ContentType
	m.ResponseTopic, m.CorrelationData, m.UserProps = meta.ResponseTopic, meta.CorrelationData, meta.UserProps
	return m
}
