module magnum-capi/tests/clients/gophercloud

go 1.26

require github.com/gophercloud/gophercloud/v2 v2.16.0
