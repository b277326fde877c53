package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// ca is a certificate authority as Cluster API keeps it in a <cluster>-ca or <cluster>-etcd Secret
// (tls.crt, tls.key). magnum-capi makes ECDSA P-256 CAs, Cluster API's own RSA ones: both sign.
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte // tls.crt as stored, to notice a rotation
}

func parseCA(certPEM, keyPEM []byte) (*ca, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("tls.crt holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.key: %w", err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("tls.key is not the key of tls.crt")
	}
	return &ca{cert: cert, key: key, pem: certPEM}, nil
}

// parsePrivateKey reads a PKCS#1 RSA, SEC 1 EC or PKCS#8 (RSA or ECDSA) PEM private key.
func parsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			return k, nil
		case *ecdsa.PrivateKey:
			return k, nil
		default:
			return nil, fmt.Errorf("unsupported PKCS#8 key type %T", k)
		}
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// leaf is what issue makes.
type leaf struct {
	cn       string
	org      []string
	dns      []string
	ips      []net.IP
	usages   []x509.ExtKeyUsage
	validity time.Duration
}

// issue signs a fresh ECDSA P-256 key for l with the CA.
func (c *ca) issue(l leaf) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	validity := l.validity
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	now := time.Now()
	notAfter := now.Add(validity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.cn, Organization: l.org},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  l.usages,
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", l.cn, err)
	}
	leafCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leafCert}, nil
}

// apiServerLeaf is the kube-apiserver serving certificate kubeadm makes (CN kube-apiserver: KCP
// reads its expiry through a port-forward to the kube-apiserver Pod and looks for that CN).
func apiServerLeaf(host string, serviceIP net.IP, dnsDomain string) leaf {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	if ip := net.ParseIP(host); ip != nil {
		ips = append(ips, ip)
	}
	if serviceIP != nil {
		ips = append(ips, serviceIP)
	}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + dnsDomain}
	if net.ParseIP(host) == nil && host != "" {
		dns = append(dns, host)
	}
	return leaf{cn: "kube-apiserver", dns: dns, ips: ips, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}

// etcdLeaf is an etcd member's serving certificate: KCP's etcd client dials "etcd-<node>" through
// a port-forward and checks that name against the <cluster>-etcd CA.
func etcdLeaf(podName, host string) leaf {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	if ip := net.ParseIP(host); ip != nil {
		ips = append(ips, ip)
	}
	return leaf{cn: podName, dns: []string{"localhost", podName}, ips: ips,
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
}

// firstServiceIP is the first address of the service CIDR (the "kubernetes" Service's ClusterIP).
func firstServiceIP(cidr string) net.IP {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil
	}
	ip := make(net.IP, len(n.IP))
	copy(ip, n.IP)
	ip[len(ip)-1]++
	return ip
}
