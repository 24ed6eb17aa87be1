// Package result holds the JSON envelope every agentplane program prints: the
// typed error that carries a stable code, the table that maps codes to exit
// statuses, and the single encoder that writes a result to stdout.
package result

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Error is an operation failure with a stable snake_case code. Engines return
// it (or wrap it) so the CLI layer can report the code without string matching.
type Error struct {
	Code    string         // stable, snake_case: "file_not_found"
	Message string         // one human sentence, lower case, no final period
	Details map[string]any // extra fields merged into the "error" object (hint, lines, …)
	Err     error          // optional cause, not printed
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// With returns e with one more detail field; it mutates and returns e for chaining.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// Wrap attaches a cause to e.
func (e *Error) Wrap(err error) *Error {
	e.Err = err
	return e
}

// AsError extracts an *Error from err, or wraps an unknown error as code
// "internal_error" so that every failure still has a stable code.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error(), Err: err}
}

// Object is a result under construction: an ordered set of fields. Order is
// kept so that "success" comes first and humans can read the output.
type Object struct {
	keys   []string
	values map[string]any
}

// New returns an empty result object.
func New() *Object { return &Object{values: map[string]any{}} }

// Set sets a field, keeping the order of first insertion.
func (o *Object) Set(key string, v any) *Object {
	if _, ok := o.values[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.values[key] = v
	return o
}

// WithFirst returns a copy of o with key set to v as its first field.
func (o *Object) WithFirst(key string, v any) *Object {
	c := New().Set(key, v)
	for _, k := range o.keys {
		c.Set(k, o.values[k])
	}
	c.values[key] = v
	return c
}

// Get returns a field's value.
func (o *Object) Get(key string) (any, bool) {
	v, ok := o.values[key]
	return v, ok
}

// Delete removes a field.
func (o *Object) Delete(key string) {
	if _, ok := o.values[key]; !ok {
		return
	}
	delete(o.values, key)
	for i, k := range o.keys {
		if k == key {
			o.keys = append(o.keys[:i], o.keys[i+1:]...)
			break
		}
	}
}

// MarshalJSON writes the fields in insertion order.
func (o *Object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := marshal(o.values[k])
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", k, err)
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Failure builds the result object for an error: success false and the error
// object with its code, message and details.
func Failure(err error) *Object {
	e := AsError(err)
	eo := New().Set("code", e.Code).Set("message", e.Message)
	for k, v := range e.Details {
		eo.Set(k, v)
	}
	return New().Set("success", false).Set("error", eo)
}

// ErrorObject renders e as the value of an "error" field.
func ErrorObject(err error) *Object {
	v, _ := Failure(err).Get("error")
	return v.(*Object)
}

// marshal encodes v without HTML escaping, so "<" and "&" in command output
// stay readable.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Marshal encodes v as compact JSON without HTML escaping.
func Marshal(v any) ([]byte, error) { return marshal(v) }

// Write encodes v as one JSON document and a newline on w; pretty indents it.
// It is the one function that writes a program's result.
func Write(w io.Writer, v any, pretty bool) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	if pretty {
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		b = out.Bytes()
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// TimeFormat is how every timestamp in a result is written: RFC 3339, UTC,
// with milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }
