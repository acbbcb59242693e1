"""Decoding sample fields: the ``decode`` stage, its basic and image handlers, tenbin."""

from wdspipes.samples.decoders.basic import BasicDecoder, Continue, UntrustedDataError, gunzip
from wdspipes.samples.decoders.decoder import (
    Decoder,
    ExtensionHandler,
    SampleDecoder,
    decode,
    decode_field,
    handle_extension,
)
from wdspipes.samples.decoders.geometry import RandomResizedCrop
from wdspipes.samples.decoders.images import IMAGE_SPECS, ImageDecoder, image_extensions

__all__ = [
    "IMAGE_SPECS",
    "BasicDecoder",
    "Continue",
    "Decoder",
    "ExtensionHandler",
    "ImageDecoder",
    "RandomResizedCrop",
    "SampleDecoder",
    "UntrustedDataError",
    "decode",
    "decode_field",
    "gunzip",
    "handle_extension",
    "image_extensions",
]
