package console

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dropNonFinite sets every number in *p that JSON cannot carry (NaN,
// ±Inf) to 0 and names each, by its path of JSON names, with the value
// it had. It reaches every exported field, element, map value and
// pointer, whoever filled them: a view holding one such number cannot be
// encoded at all (encoding/json refuses it), so every figure of every
// card would be lost for one.
func dropNonFinite[T any](p *T) []string {
	w := finiteWalk{seen: map[uintptr]bool{}}
	w.walk(reflect.ValueOf(p).Elem(), "")
	return w.bad
}

type finiteWalk struct {
	bad  []string
	seen map[uintptr]bool // pointers walked (a structure may share or loop)
}

var timeType = reflect.TypeFor[time.Time]()

func (w *finiteWalk) walk(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); !finite(f) && v.CanSet() {
			w.bad = append(w.bad, fmt.Sprintf("%s = %v", cmp.Or(path, "value"), f))
			v.SetFloat(0)
		}
	case reflect.Pointer:
		if v.IsNil() || w.seen[v.Pointer()] {
			return
		}
		w.seen[v.Pointer()] = true
		w.walk(v.Elem(), path)
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		// What an interface holds cannot be set in place: walk a copy,
		// and put it back when something was dropped.
		cp := reflect.New(v.Elem().Type()).Elem()
		cp.Set(v.Elem())
		if w.changed(cp, path) && v.CanSet() {
			v.Set(cp)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case f.Anonymous && name == "":
				w.walk(v.Field(i), path) // inlined by encoding/json
				continue
			case name == "":
				name = f.Name
			}
			w.walk(v.Field(i), join(path, name))
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			w.walk(v.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			cp := reflect.New(v.Type().Elem()).Elem()
			cp.Set(v.MapIndex(k))
			if w.changed(cp, join(path, fmt.Sprint(k))) {
				v.SetMapIndex(k, cp)
			}
		}
	default:
		// Strings, integers, booleans: always encodable.
	}
}

// changed walks v and says whether it dropped anything.
func (w *finiteWalk) changed(v reflect.Value, path string) bool {
	n := len(w.bad)
	w.walk(v, path)
	return len(w.bad) > n
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
