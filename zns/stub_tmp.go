package zns

import "fmt"

func openBlock(path string, _ Options) (Device, error) {
	return nil, fmt.Errorf("zns: %s: zoned block devices are not supported yet", path)
}

func openPassthrough(path string, _ Options) (Device, error) {
	return nil, fmt.Errorf("zns: %s: NVMe passthrough is not supported yet", path)
}
