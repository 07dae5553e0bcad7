#!/usr/bin/python3
"""Data sets in the formats `edgecost train --data` reads, for tests/train/data_test.cc.

Usage: /usr/bin/python3 tests/train/make_data.py DIR
  DIR/set.npz             np.savez (stored): x float32 (23, 3, 2, 2) with record i all i, y int64 i % 3
  DIR/packed.npz          np.savez_compressed (deflated): inputs uint8 (10, 3, 2, 2) = 10 i + channel, labels int32 i % 3
  DIR/x.npy, DIR/y.npy    x float64 (6, 3, 2, 2) = i, y int64 (6,) = (5 - i) % 3
  DIR/train_x.npy, DIR/train_y.npy  x float32 (4, 3, 2, 2), y float32 (4,) = 0, 1, 2, 2.5 (not a class)
  DIR/fortran_x.npy       x in Fortran order
  DIR/images/             class folders b_dog, a_cat (class 0 by name), c_owl/deeper; a 2x2 RGB PNG with
                          known pixels, an RGBA PNG, a grayscale PNG, a constant-colour JPEG, a 4x4 PNG
                          (resized to 2x2), a text file that is not an image
Exit status 3: no numpy or PIL.
"""
import os
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"needs numpy and PIL: {e}", file=sys.stderr)
    sys.exit(3)


def main(out):
    x = np.repeat(np.arange(23, dtype=np.float32), 12).reshape(23, 3, 2, 2)
    np.savez(os.path.join(out, "set.npz"), x=x, y=np.arange(23, dtype=np.int64) % 3)
    packed = (10 * np.arange(10)[:, None, None, None] + np.arange(3)[None, :, None, None]) * np.ones((1, 1, 2, 2))
    np.savez_compressed(os.path.join(out, "packed.npz"), inputs=packed.astype(np.uint8),
                        labels=(np.arange(10) % 3).astype(np.int32))
    np.save(os.path.join(out, "x.npy"), np.repeat(np.arange(6, dtype=np.float64), 12).reshape(6, 3, 2, 2))
    np.save(os.path.join(out, "y.npy"), (5 - np.arange(6, dtype=np.int64)) % 3)
    np.save(os.path.join(out, "train_x.npy"), np.zeros((4, 3, 2, 2), np.float32))
    np.save(os.path.join(out, "train_y.npy"), np.array([0, 1, 2, 2.5], np.float32))
    np.save(os.path.join(out, "fortran_x.npy"), np.asfortranarray(np.zeros((4, 3, 2, 2), np.float32).transpose()))

    images = os.path.join(out, "images")
    for folder in ("b_dog", "a_cat", "c_owl/deeper"):
        os.makedirs(os.path.join(images, folder))
    rgb = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [10, 20, 30]]], np.uint8)
    Image.fromarray(rgb, "RGB").save(os.path.join(images, "a_cat", "1_rgb.png"))
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, 255
    Image.fromarray(rgba, "RGBA").save(os.path.join(images, "a_cat", "2_rgba.PNG"))
    Image.fromarray(np.full((2, 2), 77, np.uint8), "L").save(os.path.join(images, "b_dog", "gray.png"))
    Image.fromarray(np.full((16, 16, 3), [40, 120, 200], np.uint8), "RGB").save(
        os.path.join(images, "b_dog", "photo.jpg"), quality=95)
    big = np.arange(16, dtype=np.uint8).reshape(4, 4) * 10
    Image.fromarray(np.stack([big] * 3, axis=-1), "RGB").save(os.path.join(images, "c_owl", "deeper", "big.png"))
    with open(os.path.join(images, "b_dog", "notes.txt"), "w") as f:
        f.write("not an image\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
