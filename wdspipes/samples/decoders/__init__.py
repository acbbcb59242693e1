"""Decoding sample fields: the ``decode`` stage, its basic and image handlers, tenbin."""

from wdspipes.samples.decoders.basic import (
    MAX_DECODED_SIZE,
    BasicDecoder,
    Continue,
    DataLimitError,
    Gunzip,
    UntrustedDataError,
    gunzip,
)
from wdspipes.samples.decoders.decoder import (
    Decoder,
    ExtensionHandler,
    SampleDecoder,
    decode_field,
    handle_extension,
)
from wdspipes.samples.decoders.geometry import RandomResizedCrop
from wdspipes.samples.decoders.images import (
    IMAGE_FORMATS,
    IMAGE_SPECS,
    MAX_PIXELS,
    ImageDecoder,
    ImageFormatError,
    ImageTooLargeError,
    image_extensions,
    open_image,
)

__all__ = [
    "IMAGE_FORMATS",
    "IMAGE_SPECS",
    "MAX_DECODED_SIZE",
    "MAX_PIXELS",
    "BasicDecoder",
    "Continue",
    "DataLimitError",
    "Decoder",
    "ExtensionHandler",
    "Gunzip",
    "ImageDecoder",
    "ImageFormatError",
    "ImageTooLargeError",
    "RandomResizedCrop",
    "SampleDecoder",
    "UntrustedDataError",
    "decode_field",
    "gunzip",
    "handle_extension",
    "image_extensions",
    "open_image",
]
