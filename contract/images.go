package contract

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"strings"

	"github.com/berth-dev/berth"
)

// maxPixels bounds an image's width × height before it is decoded in
// full, so that a small file cannot make the server allocate gigabytes.
const maxPixels = 100 << 20

// image checks the request's i-th image, a data URL
// (data:image/png;base64,…) or bare base64, against the contract's
// limits, scales it down to MaxSide when it is larger, and returns it as
// the data URL the model receives. A bad image is an input_rejected
// *berth.Error naming images[i].
func (c *Contract) image(i int, given string) (string, error) {
	field := fmt.Sprintf("images[%d]", i)
	lim := c.Images
	b64 := given
	if rest, ok := strings.CutPrefix(given, "data:"); ok {
		meta, data, found := strings.Cut(rest, ",")
		if !found || !strings.HasSuffix(meta, ";base64") {
			return "", berth.Invalidf(field, "a data URL must be base64: data:image/png;base64,…")
		}
		b64 = data
	}
	b64 = strings.TrimRight(b64, "=")
	if int64(len(b64))*3/4 > int64(lim.MaxBytes) {
		return "", berth.Invalidf(field, "about %d bytes, over the contract's limit of %s (images.max_bytes)", len(b64)*3/4, lim.MaxBytes)
	}
	raw, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil {
		return "", berth.Invalidf(field, "not base64: %v", err)
	}
	if int64(len(raw)) > int64(lim.MaxBytes) {
		return "", berth.Invalidf(field, "%d bytes, over the contract's limit of %s (images.max_bytes)", len(raw), lim.MaxBytes)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || (format != "png" && format != "jpeg") {
		return "", berth.Invalidf(field, "not a PNG or JPEG image")
	}
	if cfg.Width*cfg.Height > maxPixels {
		return "", berth.Invalidf(field, "%dx%d pixels, over the limit of %d megapixels", cfg.Width, cfg.Height, maxPixels>>20)
	}
	if lim.MaxSide > 0 && max(cfg.Width, cfg.Height) > lim.MaxSide {
		if raw, err = downscale(raw, format, lim.MaxSide); err != nil {
			return "", berth.Invalidf(field, "%v", err)
		}
	}
	return "data:image/" + format + ";base64," + base64.StdEncoding.EncodeToString(raw), nil
}

// downscale decodes data, an image in format (png or jpeg), scales it so
// that its longest side is side pixels (keeping its aspect ratio,
// averaging the source pixels each target pixel covers) and encodes it
// again in format.
func downscale(data []byte, format string, side int) ([]byte, error) {
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not a readable %s image: %w", format, err)
	}
	dst := scale(src, side)
	var out bytes.Buffer
	if format == "png" {
		err = png.Encode(&out, dst)
	} else {
		err = jpeg.Encode(&out, dst, &jpeg.Options{Quality: 90})
	}
	if err != nil {
		return nil, fmt.Errorf("re-encode the scaled image: %w", err)
	}
	return out.Bytes(), nil
}

// scale returns src scaled so that its longest side is side pixels,
// keeping its aspect ratio (each side at least 1 pixel): a box filter,
// each target pixel the mean of the source pixels it covers. An image
// already no larger is returned as it is.
func scale(src image.Image, side int) image.Image {
	b := src.Bounds()
	sw, sh := b.Dx(), b.Dy()
	if max(sw, sh) <= side {
		return src
	}
	dw, dh := side, max(1, sh*side/sw)
	if sh > sw {
		dw, dh = max(1, sw*side/sh), side
	}
	rgba := image.NewRGBA(image.Rect(0, 0, sw, sh))
	draw.Draw(rgba, rgba.Bounds(), src, b.Min, draw.Src)
	dst := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for y := range dh {
		y0, y1 := y*sh/dh, max((y+1)*sh/dh, y*sh/dh+1)
		for x := range dw {
			x0, x1 := x*sw/dw, max((x+1)*sw/dw, x*sw/dw+1)
			var sum [4]int
			for sy := y0; sy < y1; sy++ {
				row := rgba.Pix[sy*rgba.Stride+x0*4 : sy*rgba.Stride+x1*4]
				for p := 0; p < len(row); p += 4 {
					sum[0] += int(row[p])
					sum[1] += int(row[p+1])
					sum[2] += int(row[p+2])
					sum[3] += int(row[p+3])
				}
			}
			n := (y1 - y0) * (x1 - x0)
			o := y*dst.Stride + x*4
			for k := range 4 {
				dst.Pix[o+k] = uint8((sum[k] + n/2) / n)
			}
		}
	}
	return dst
}
