"""What DomainBed's datasets look like on disk once downloaded, and how many images they hold:
the names DomainBed's ``datasets.py`` (commit b93c22a) opens and its ``scripts/download.py``
leaves, and each count with where it was published (a copy whose counts match none of a
dataset's releases is not the data the published results were trained on). Facts only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The file dmg_domainbed.synthetic leaves in a dataset folder of random images it wrote.
SYNTHETIC_MARKER = "SYNTHETIC.txt"


@dataclass(frozen=True)
class Release:
    """The image counts of one published release of a dataset (``per_domain``: ``None`` where
    only the total was published)."""

    name: str
    source: str
    total: int
    per_domain: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        if self.per_domain is not None and sum(self.per_domain.values()) != self.total:
            raise ValueError(f"{self.name}: the domains' counts do not add up to {self.total}")


@dataclass(frozen=True)
class ImageDatasetLayout:
    """One of DomainBed's image datasets as its download leaves it under ``--data_dir``.

    ``domains`` are the domain folders (sorted, they are DomainBed's environments in order);
    ``classes`` the class folders of every domain (``None`` where not known here);
    ``deleted_by_download`` the file of DomainBed's package listing files its download deletes
    after unpacking.
    """

    folder: str
    domains: tuple[str, ...]
    classes: tuple[str, ...] | None
    releases: tuple[Release, ...] = ()
    deleted_by_download: str | None = None


_DOMAINNET_CLASSES = """
aircraft_carrier airplane alarm_clock ambulance angel animal_migration ant anvil apple arm
asparagus axe backpack banana bandage barn baseball baseball_bat basket basketball bat bathtub
beach bear beard bed bee belt bench bicycle binoculars bird birthday_cake blackberry blueberry
book boomerang bottlecap bowtie bracelet brain bread bridge broccoli broom bucket bulldozer bus
bush butterfly cactus cake calculator calendar camel camera camouflage campfire candle cannon
canoe car carrot castle cat ceiling_fan cello cell_phone chair chandelier church circle clarinet
clock cloud coffee_cup compass computer cookie cooler couch cow crab crayon crocodile crown
cruise_ship cup diamond dishwasher diving_board dog dolphin donut door dragon dresser drill drums
duck dumbbell ear elbow elephant envelope eraser eye eyeglasses face fan feather fence finger
fire_hydrant fireplace firetruck fish flamingo flashlight flip_flops floor_lamp flower
flying_saucer foot fork frog frying_pan garden garden_hose giraffe goatee golf_club grapes grass
guitar hamburger hammer hand harp hat headphones hedgehog helicopter helmet hexagon hockey_puck
hockey_stick horse hospital hot_air_balloon hot_dog hot_tub hourglass house house_plant
hurricane ice_cream jacket jail kangaroo key keyboard knee knife ladder lantern laptop leaf leg
light_bulb lighter lighthouse lightning line lion lipstick lobster lollipop mailbox map marker
matches megaphone mermaid microphone microwave monkey moon mosquito motorbike mountain mouse
moustache mouth mug mushroom nail necklace nose ocean octagon octopus onion oven owl paintbrush
paint_can palm_tree panda pants paper_clip parachute parrot passport peanut pear peas pencil
penguin piano pickup_truck picture_frame pig pillow pineapple pizza pliers police_car pond pool
popsicle postcard potato power_outlet purse rabbit raccoon radio rain rainbow rake
remote_control rhinoceros rifle river roller_coaster rollerskates sailboat sandwich saw
saxophone school_bus scissors scorpion screwdriver sea_turtle see_saw shark sheep shoe shorts
shovel sink skateboard skull skyscraper sleeping_bag smiley_face snail snake snorkel snowflake
snowman soccer_ball sock speedboat spider spoon spreadsheet square squiggle squirrel stairs star
steak stereo stethoscope stitches stop_sign stove strawberry streetlight string_bean submarine
suitcase sun swan sweater swing_set sword syringe table teapot teddy-bear telephone television
tennis_racquet tent The_Eiffel_Tower The_Great_Wall_of_China The_Mona_Lisa tiger toaster toe
toilet tooth toothbrush toothpaste tornado tractor traffic_light train tree triangle trombone
truck trumpet t-shirt umbrella underwear van vase violin washing_machine watermelon waterslide
whale wheel windmill wine_bottle wine_glass wristwatch yoga zebra zigzag
"""
_OFFICEHOME_CLASSES = """
Alarm_Clock Backpack Batteries Bed Bike Bottle Bucket Calculator Calendar Candles Chair
Clipboards Computer Couch Curtains Desk_Lamp Drill Eraser Exit_Sign Fan File_Cabinet Flipflops
Flowers Folder Fork Glasses Hammer Helmet Kettle Keyboard Knives Lamp_Shade Laptop Marker
Monitor Mop Mouse Mug Notebook Oven Pan Paper_Clip Pen Pencil Postit_Notes Printer Push_Pin
Radio Refrigerator Ruler Scissors Screwdriver Shelf Sink Sneakers Soda Speaker Spoon TV Table
Telephone ToothBrush Toys Trash_Can Webcam
"""
_TERRA_CLASSES = "bird bobcat cat coyote dog empty opossum rabbit raccoon squirrel"

_DOMAINNET_PUBLISHED = dict(
    clipart=48_129,
    infograph=51_605,
    painting=72_266,
    quickdraw=172_500,
    real=172_947,
    sketch=69_128,
)
# Lines per domain of domainbed/misc/domain_net_duplicates.txt (9,431 at b93c22a): the files
# DomainBed's download_domain_net deletes after unpacking.
DOMAINNET_DUPLICATES_FILE = "misc/domain_net_duplicates.txt"
_DOMAINNET_DUPLICATES = dict(
    clipart=704, infograph=1_596, painting=3_493, quickdraw=0, real=2_380, sketch=1_258
)
_DOMAINNET_AFTER_DOWNLOAD = {
    domain: count - _DOMAINNET_DUPLICATES[domain] for domain, count in _DOMAINNET_PUBLISHED.items()
}

IMAGE_LAYOUTS: dict[str, ImageDatasetLayout] = {
    "PACS": ImageDatasetLayout(
        folder="PACS",
        domains=("art_painting", "cartoon", "photo", "sketch"),
        classes=("dog", "elephant", "giraffe", "guitar", "horse", "house", "person"),
        releases=(
            Release(
                "PACS as DomainBed downloads it (the authors' kfold folder)",
                "Li, Yang, Song and Hospedales, 'Deeper, Broader and Artier Domain "
                "Generalization', ICCV 2017; 9,991 in total: Gulrajani and Lopez-Paz, ICLR 2021",
                9_991,
                {"art_painting": 2_048, "cartoon": 2_344, "photo": 1_670, "sketch": 3_929},
            ),
        ),
    ),
    "VLCS": ImageDatasetLayout(
        folder="VLCS",
        domains=("Caltech101", "LabelMe", "SUN09", "VOC2007"),
        classes=("bird", "car", "chair", "dog", "person"),
        releases=(
            Release(
                "VLCS as DomainBed downloads it (VLCS.tar.gz)",
                "per domain: the VLCS copy of Li et al., ICCV 2017 (their project page), which "
                "DomainBed downloads; 10,729 in total: Gulrajani and Lopez-Paz, ICLR 2021",
                10_729,
                {"Caltech101": 1_415, "LabelMe": 2_656, "SUN09": 3_282, "VOC2007": 3_376},
            ),
        ),
    ),
    "OfficeHome": ImageDatasetLayout(
        folder="office_home",
        domains=("Art", "Clipart", "Product", "Real World"),
        classes=tuple(_OFFICEHOME_CLASSES.split()),
        releases=(
            Release(
                "OfficeHomeDataset_10072016 as DomainBed downloads it",
                "Venkateswara, Eusebio, Chakraborty and Panchanathan, 'Deep Hashing Network for "
                "Unsupervised Domain Adaptation', CVPR 2017; 15,588 in total: Gulrajani and "
                "Lopez-Paz, ICLR 2021",
                15_588,
                {"Art": 2_427, "Clipart": 4_365, "Product": 4_439, "Real World": 4_357},
            ),
        ),
    ),
    "TerraIncognita": ImageDatasetLayout(
        folder="terra_incognita",
        domains=("location_100", "location_38", "location_43", "location_46"),
        classes=tuple(_TERRA_CLASSES.split()),
        releases=(
            Release(
                "TerraIncognita of DomainBed's paper (download of 2020)",
                "per location: the MIRO authors, github.com/khanrc/miro issue 9; 24,788 in "
                "total: Gulrajani and Lopez-Paz, ICLR 2021",
                24_788,
                dict(location_100=4_879, location_38=9_767, location_43=4_020, location_46=6_122),
            ),
            Release(
                "TerraIncognita of DomainBed's download.py since 2021 (lila.science files)",
                "total only: github.com/khanrc/miro issue 9 and facebookresearch/DomainBed "
                "issue 58",
                24_330,
            ),
        ),
    ),
    "DomainNet": ImageDatasetLayout(
        folder="domain_net",
        domains=("clipart", "infograph", "painting", "quickdraw", "real", "sketch"),
        classes=tuple(_DOMAINNET_CLASSES.split()),
        releases=(
            Release(
                "DomainNet as DomainBed's download_domain_net leaves it (duplicates deleted)",
                "Peng et al., 'Moment Matching for Multi-Source Domain Adaptation', ICCV 2019, "
                f"less the lines of DomainBed's {DOMAINNET_DUPLICATES_FILE}",
                sum(_DOMAINNET_AFTER_DOWNLOAD.values()),
                _DOMAINNET_AFTER_DOWNLOAD,
            ),
            Release(
                "DomainNet as published (DomainBed's duplicates not deleted)",
                "Peng et al., ICCV 2019; 586,575 in total: Gulrajani and Lopez-Paz, ICLR 2021",
                586_575,
                _DOMAINNET_PUBLISHED,
            ),
        ),
        deleted_by_download=DOMAINNET_DUPLICATES_FILE,
    ),
    "SVIRO": ImageDatasetLayout(
        folder="sviro",
        domains=tuple("aclass escape hilux i3 lexus tesla tiguan tucson x5 zoe".split()),
        classes=None,
    ),
}
# DomainBed dataset -> folder under data_dir holding one sub-folder per domain (ImageFolder).
IMAGE_FOLDERS = {name: layout.folder for name, layout in IMAGE_LAYOUTS.items()}


@dataclass(frozen=True)
class WildsLayout:
    """A WILDS dataset under ``--data_dir``: ``<name>_v<version>/`` with the release marker
    ``RELEASE_v<version>.txt`` and its images under ``images``; DomainBed's domains are the
    values of the metadata field ``domain_field``."""

    name: str
    version: str
    images: str
    domain_field: str
    wilds_class: str

    @property
    def folder(self) -> str:
        return f"{self.name}_v{self.version}"

    @property
    def marker(self) -> str:
        return f"RELEASE_v{self.version}.txt"


_FMOW = "wilds.datasets.fmow_dataset:FMoWDataset"
_CAMELYON = "wilds.datasets.camelyon17_dataset:Camelyon17Dataset"
WILDS_LAYOUTS = {
    "WILDSCamelyon": WildsLayout("camelyon17", "1.0", "patches", "hospital", _CAMELYON),
    "WILDSFMoW": WildsLayout("fmow", "1.1", "images", "region", _FMOW),
}

MNIST_DATASETS = ("ColoredMNIST", "RotatedMNIST")
# torchvision's MNIST folder under DomainBed's --data_dir; its raw files are those both read.
MNIST_FOLDER = "MNIST"
# torchvision's MNIST files: (images in the file, source). DomainBed pools both files.
MNIST_IMAGES = {
    "train": (60_000, "LeCun, Cortes and Burges, the MNIST database: 60,000 training images"),
    "t10k": (10_000, "LeCun, Cortes and Burges, the MNIST database: 10,000 test images"),
}
MNIST_SIDE = 28

# Datasets DomainBed builds in memory: no files.
NO_FILES = ("Debug28", "Debug224")
