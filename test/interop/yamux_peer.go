// A hashicorp/yamux peer for relay's interop tests (Debian's golang-github-hashicorp-yamux-dev, GOPATH mode).
//
//	yamux_peer server            listen on 127.0.0.1:0, print the port, echo length-prefixed messages
//	yamux_peer client ADDR N     dial ADDR, send N pseudo-random bytes length-prefixed, read the echo,
//	                             print "sent <sha256> got <sha256>"
//
// Messages are an 8-byte big-endian length then the bytes; each side closes the stream after its message.
// This avoids relying on half-close, which the 2019 snapshot packaged by Debian gets wrong.
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/hashicorp/yamux"
)

func pattern(n int64, seed uint32) []byte {
	b := make([]byte, n)
	x := seed
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func readMsg(r io.Reader) ([]byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint64(hdr[:]))
	_, err := io.ReadFull(r, buf)
	return buf, err
}

func writeMsg(w io.Writer, b []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(b)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = os.Stderr
	return c
}

func main() {
	switch os.Args[1] {
	case "server":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		conn, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		sess, err := yamux.Server(conn, config())
		if err != nil {
			panic(err)
		}
		for {
			st, err := sess.Accept()
			if err != nil {
				fmt.Fprintln(os.Stderr, "session over:", err)
				return
			}
			go func(st net.Conn) {
				defer st.Close()
				msg, err := readMsg(st)
				if err != nil {
					fmt.Fprintln(os.Stderr, "read:", err)
					return
				}
				if err := writeMsg(st, msg); err != nil {
					fmt.Fprintln(os.Stderr, "write:", err)
				}
			}(st)
		}
	case "client":
		n, _ := strconv.ParseInt(os.Args[3], 10, 64)
		conn, err := net.Dial("tcp", os.Args[2])
		if err != nil {
			panic(err)
		}
		sess, err := yamux.Client(conn, config())
		if err != nil {
			panic(err)
		}
		st, err := sess.Open()
		if err != nil {
			panic(err)
		}
		data := pattern(n, 7)
		done := make(chan error, 1)
		go func() { done <- writeMsg(st, data) }()
		got, err := readMsg(st)
		if err != nil {
			panic(err)
		}
		if err := <-done; err != nil {
			panic(err)
		}
		st.Close()
		a := sha256.Sum256(data)
		b := sha256.Sum256(got)
		fmt.Printf("sent %s got %s\n", hex.EncodeToString(a[:]), hex.EncodeToString(b[:]))
		sess.Close()
	}
}
