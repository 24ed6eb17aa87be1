package clikit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration accepts Go syntax ("90s", "2m") or a bare number of seconds
// ("90", "1.5"). Negative durations are refused.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		d = time.Duration(f * float64(time.Second))
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q (use Go syntax like 90s or 2m, or a number of seconds)", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// ParseSize accepts a bare number of bytes or a K/M/G suffix in powers of
// 1024 ("64M", "1G", "512k", "64MiB").
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	up := strings.ToUpper(t)
	up = strings.TrimSuffix(up, "IB")
	up = strings.TrimSuffix(up, "B")
	mult := int64(1)
	if n := len(up); n > 0 {
		switch up[n-1] {
		case 'K':
			mult, up = 1<<10, up[:n-1]
		case 'M':
			mult, up = 1<<20, up[:n-1]
		case 'G':
			mult, up = 1<<30, up[:n-1]
		case 'T':
			mult, up = 1<<40, up[:n-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(up), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q (use bytes or a K/M/G suffix)", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("negative size %q", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q out of range", s)
	}
	return n * mult, nil
}

// DurationValue is a pflag.Value for durations in the contract's syntax.
type DurationValue struct{ D *time.Duration }

func (v DurationValue) String() string {
	if v.D == nil {
		return "0s"
	}
	return v.D.String()
}

// Set parses s.
func (v DurationValue) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

// Type names the value kind for help and schemas.
func (v DurationValue) Type() string { return "duration" }

// SizeValue is a pflag.Value for byte sizes.
type SizeValue struct{ N *int64 }

func (v SizeValue) String() string {
	if v.N == nil {
		return "0"
	}
	return strconv.FormatInt(*v.N, 10)
}

// Set parses s.
func (v SizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v.N = n
	return nil
}

// Type names the value kind for help and schemas.
func (v SizeValue) Type() string { return "size" }

// EnumValue is a pflag.Value restricted to a set of words.
type EnumValue struct {
	S       *string
	Allowed []string
}

func (v EnumValue) String() string {
	if v.S == nil {
		return ""
	}
	return *v.S
}

// Set checks s against the allowed words.
func (v EnumValue) Set(s string) error {
	for _, a := range v.Allowed {
		if s == a {
			*v.S = s
			return nil
		}
	}
	return fmt.Errorf("must be one of %s, not %q", strings.Join(v.Allowed, "|"), s)
}

// Type names the value kind for help and schemas.
func (v EnumValue) Type() string { return "enum" }
