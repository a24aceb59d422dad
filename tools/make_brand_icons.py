"""Draw the integration's brand images (custom_components/voice_stack/brand/) with Pillow.

Run from the repository root with the ha environment:
    .cache/venv/ha/bin/python tools/make_brand_icons.py
Writes icon.png (256x256), icon@2x.png (512x512), logo.png (256 px high), logo@2x.png and
the dark_logo variants.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

BRAND = Path(__file__).resolve().parents[1] / "custom_components" / "voice_stack" / "brand"
SUPERSAMPLE = 4
BACKGROUND = (22, 58, 99, 255)  # deep blue
ACCENT = (255, 176, 32, 255)  # amber: the LLM layer
WHITE = (255, 255, 255, 255)
# Relative heights of the voice-wave bars, symmetric around the middle one.
BARS = (0.30, 0.55, 0.85, 0.55, 0.30)


def draw_icon(size: int) -> Image.Image:
    """A rounded square: a voice waveform above a three-layer stack."""
    big = size * SUPERSAMPLE
    image = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((0, 0, big - 1, big - 1), radius=big // 5, fill=BACKGROUND)
    bar_w = big // 11
    gap = bar_w // 2
    total = len(BARS) * bar_w + (len(BARS) - 1) * gap
    left = (big - total) // 2
    centre_y = int(big * 0.40)
    for i, height in enumerate(BARS):
        half = int(big * 0.26 * height)
        x = left + i * (bar_w + gap)
        draw.rounded_rectangle(
            (x, centre_y - half, x + bar_w, centre_y + half), radius=bar_w // 2, fill=WHITE
        )
    layer_h = big // 22
    for i, colour in enumerate((ACCENT, WHITE, WHITE)):
        top = int(big * 0.72) + i * (layer_h + layer_h // 2)
        inset = big // 5 + i * big // 24
        draw.rounded_rectangle(
            (inset, top, big - inset, top + layer_h), radius=layer_h // 2, fill=colour
        )
    return image.resize((size, size), Image.Resampling.LANCZOS)


def draw_logo(height: int, text_colour: tuple[int, int, int, int] = BACKGROUND) -> Image.Image:
    """The icon followed by the name, on a transparent background."""
    icon = draw_icon(height)
    font = ImageFont.load_default(size=int(height * 0.42))
    text = "Voice Stack"
    probe = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    left, top, right, bottom = probe.textbbox((0, 0), text, font=font)
    width = int(height + height // 6 + (right - left) + height // 12)
    logo = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    logo.paste(icon, (0, 0), icon)
    draw = ImageDraw.Draw(logo)
    y = (height - (bottom - top)) // 2 - top
    draw.text((height + height // 6, y), text, font=font, fill=text_colour)
    return logo


def main() -> None:
    BRAND.mkdir(parents=True, exist_ok=True)
    draw_icon(256).save(BRAND / "icon.png", optimize=True)
    draw_icon(512).save(BRAND / "icon@2x.png", optimize=True)
    draw_logo(256).save(BRAND / "logo.png", optimize=True)
    draw_logo(512).save(BRAND / "logo@2x.png", optimize=True)
    # Dark themes: the same logo with a white name.
    draw_logo(256, WHITE).save(BRAND / "dark_logo.png", optimize=True)
    draw_logo(512, WHITE).save(BRAND / "dark_logo@2x.png", optimize=True)


if __name__ == "__main__":
    main()
